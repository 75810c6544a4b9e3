"""Choice of device and dtype for loaded models."""

from __future__ import annotations

import torch

from dpsynrag.models.errors import ModelLoadError

# CPU default, decided by measurement (packaged SmolLM2-135M, 2-core Xeon with AVX-512 but no
# AVX512-BF16/AMX, torch 2.13 CPU, other processes sharing the cores; median of 3 runs):
#   forward 16x128 tokens:        float32 4.5 s (2.4-5.2)   bfloat16 12.9 s (11.5-24.5)
#   KV-cached decode step 16x1:   float32 0.082 s           bfloat16 0.159 s
#   logits over 17 positions x 16 rows: max |fp32 - bf16| = 0.66 (|logits| <= 35), argmax
#   agreement 95.6 %, top-10 overlap 96.7 %, softmax total variation up to 0.048;
#   after clip_logits(c=0.1): max abs diff 0.0247 (25 % of c), max row L1 diff 0.236.
# Tolerance for choosing bf16: faster AND argmax agreement >= 99 % AND clipped max diff
# <= 0.01 * c. bfloat16 is both slower and outside tolerance, so the CPU default is float32.
CPU_DEFAULT_DTYPE = torch.float32
CUDA_DEFAULT_DTYPE = torch.bfloat16

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``cuda`` when available else ``cpu``, unless ``device`` names one (checked to exist)."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ModelLoadError(f"unknown device {device!r}: {error}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} requested but CUDA is not available here")
    return resolved


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """The given dtype (name or ``torch.dtype``), or the measured default for ``device``."""
    if dtype is None:
        return CUDA_DEFAULT_DTYPE if device.type == "cuda" else CPU_DEFAULT_DTYPE
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPES.values():
            raise ModelLoadError(f"unsupported dtype {dtype}; use float32, bfloat16 or float16")
        return dtype
    key = str(dtype).strip().lower().removeprefix("torch.")
    if key not in _DTYPES:
        raise ModelLoadError(f"unsupported dtype {dtype!r}; use float32, bfloat16 or float16")
    return _DTYPES[key]


def quiet_model_loading() -> None:
    """No "Loading weights" progress bars from transformers: a build shows its own progress,
    and a worker's bars interleave with the driver's on the operator's terminal."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # unannotated


def free_cuda_memory(device: torch.device) -> int:
    """Free bytes on a CUDA ``device`` (``torch.cuda.mem_get_info``), after PyTorch's cache of
    unused blocks is handed back, so earlier work's cached blocks do not count as used.

    Call it before any document reaches the model: the packed engine's batch size is a public
    function of this number (``transforms.engine_memory``).
    """
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)
