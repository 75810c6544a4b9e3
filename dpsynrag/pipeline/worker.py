"""The model worker: holds the LLM and the embedder once, computes deterministic functions.

A worker never draws noise. For private prediction it runs the engine in a background thread
whose sampler talks to the driver through ``next_request`` / ``give_tokens``, in one of two
ways (``token_sampling``):

- ``host``: it hands each step's summed clipped votes (active groups x vocabulary, float64)
  to the driver, ``("votes", votes, active)``, and waits for the tokens the driver's ledger
  released;
- ``device``: it asks the driver for the step's randomness, ``("draw", active, temperature)``,
  and gets one answer per group: a token the ledger already holds (a resumed build) or a
  uniform u the ledger drew after charging the draw. It turns each u into the token by the
  exact float64 inverse CDF on the model's device (``inverse_cdf_tokens``: the token the host
  would draw from the same u, checked by a margin and recomputed on the host where the check
  fails) and reports the tokens, ``("drawn", active, tokens)``, which the driver stores in
  the ledger. The votes never leave the worker; only G uniforms and G tokens cross.

``auto`` (the default) is ``device`` when the model is on a CUDA device, else ``host``. The
same class runs in-process (``--runner local``) or as a Ray actor (``ray.remote(ModelWorker)``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsynrag.models.lazy import LazyModels
from dpsynrag.models.protocols import LLM, IdentifiedEmbedder
from dpsynrag.transforms.keywords import llm_keywords
from dpsynrag.transforms.vocabulary import public_vocabulary

if TYPE_CHECKING:  # the settings' module imports torch: annotations only
    from dpsynrag.transforms.public_prior import PublicPriorSettings


class _Cancelled(Exception):
    """The driver abandoned a prediction; the engine thread stops."""


class ModelWorker:
    """Loads the models lazily. ``llm``/``embedder`` are a path, ``None`` (packaged) or an
    already loaded object (in-process runs and tests); or ``models`` holds both, shared with
    the caller (the evaluation answers with the same loaded models as its builds)."""

    def __init__(self, llm: LLM | str | None = None,
                 embedder: IdentifiedEmbedder | str | None = None, device: str | None = None,
                 dtype: str | None = None, *, models: LazyModels | None = None) -> None:
        self.models = models if models is not None else LazyModels(llm, embedder, device, dtype)
        self._requests: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._answers: queue.Queue[list[Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ models
    @property
    def llm(self) -> LLM:
        return self.models.llm

    @property
    def embedder(self) -> IdentifiedEmbedder:
        return self.models.embedder

    def llm_identity(self) -> dict[str, Any]:
        llm = self.llm
        return {**dict(llm.identity), "vocab_size": llm.vocab_size, "device": str(llm.device),
                "dtype": str(llm.dtype).replace("torch.", ""),
                "eos_token_ids": sorted(int(t) for t in llm.eos_token_ids)}

    def embedder_identity(self) -> dict[str, Any]:
        embedder = self.embedder
        return {**dict(embedder.identity), "dimension": embedder.dimension}

    def ping(self) -> str:
        return "ok"

    # ------------------------------------------------------------------ deterministic stages
    def llm_keywords(self, texts: Sequence[str], K: int, prompt: str | None,
                     batch_size: int = 16) -> list[list[str]]:
        return llm_keywords(self.llm, list(texts), public_vocabulary(), K, prompt=prompt,
                            batch_size=batch_size)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.encode(list(texts))

    def self_filter(self, texts: Sequence[str], prompt: str | None) -> list[bool]:
        # loads torch: imported when this runs, not with this module
        from dpsynrag.transforms.self_filter import self_filter

        return self_filter(self.llm, list(texts), prompt=prompt)

    # ------------------------------------------------------------------ private prediction
    def start_prediction(self, groups: Sequence[Sequence[str]], *, prompt: str,
                         max_new_tokens: int, clip: float, temperature: float,
                         batch_rows: int | None = None,
                         response_prefix: str | Sequence[str] = "",
                         public_prior: PublicPriorSettings | None = None,
                         token_sampling: str = "auto",
                         released: Sequence[Sequence[int]] | None = None) -> str:
        """Start the engine on ``groups``; its requests come out of ``next_request``.
        ``released``: each group's tokens released before (a resumed build; public).

        Returns the token-sampling mode it runs (``host`` or ``device``)."""
        # loads torch and transformers: imported when this runs, not with this module
        from dpsynrag.transforms.private_prediction import private_predict

        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("a prediction is already running in this worker")
        mode = resolve_token_sampling(token_sampling, self.llm)
        self._requests, self._answers = queue.Queue(), queue.Queue()
        requests, answers = self._requests, self._answers

        def answer() -> list[Any]:
            reply = answers.get()
            if reply is None:
                raise _Cancelled
            return reply

        def host_sampler(votes: Any, active: list[int]) -> np.ndarray:
            array = votes.detach().to("cpu").double().numpy() if hasattr(votes, "detach") \
                else np.asarray(votes, dtype=np.float64)
            requests.put(("votes", array, [int(i) for i in active]))
            return np.asarray(answer(), dtype=np.int64)

        def device_sampler(votes: Any, active: list[int]) -> np.ndarray:
            active = [int(i) for i in active]
            requests.put(("draw", active, float(temperature)))
            tokens = tokens_from_answers(votes, temperature, answer())
            requests.put(("drawn", active, [int(t) for t in tokens]))
            return tokens

        sampler = device_sampler if mode == "device" else host_sampler

        def run() -> None:
            try:
                texts = private_predict(
                    self.llm, [list(g) for g in groups], prompt=prompt,
                    max_new_tokens=max_new_tokens, clip=clip, temperature=temperature,
                    rng=None, batch_rows=batch_rows, sampler=sampler,  # type: ignore[arg-type]
                    response_prefix=response_prefix, public_prior=public_prior,
                    released=released)
                requests.put(("done", texts))
            except _Cancelled:
                requests.put(("cancelled",))
            except BaseException as error:  # reported to the driver as one line
                requests.put(("error", f"{type(error).__name__}: {error}"))

        self._thread = threading.Thread(target=run, name="private-prediction", daemon=True)
        self._thread.start()
        return mode

    def join_prediction(self, timeout: float | None = None) -> None:
        """Wait for the engine thread to end (after ``done``, an error or a cancellation)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def next_request(self) -> tuple[Any, ...]:
        """``("votes", votes, active)``, ``("draw", active, temperature)``,
        ``("drawn", active, tokens)`` (no answer), ``("done", texts)`` or
        ``("error", message)``."""
        return self._requests.get()

    def give_tokens(self, tokens: Sequence[Any] | None) -> None:
        """The answer to the last ``votes`` (the released tokens) or ``draw`` (one
        ``(stored, token or u)`` pair per group); ``None`` cancels the prediction."""
        self._answers.put(None if tokens is None else list(tokens))


def resolve_token_sampling(mode: str, llm: Any) -> str:
    """``host`` or ``device`` for ``mode`` (``auto``: ``device`` when the model is on CUDA)."""
    # loads scipy (through the conversions): imported when this runs, not with this module
    from dpsynrag.pipeline.config import TOKEN_SAMPLING_MODES

    if mode not in TOKEN_SAMPLING_MODES:
        raise ValueError(f"token_sampling must be one of {', '.join(TOKEN_SAMPLING_MODES)}, "
                         f"not {mode!r}")
    if mode != "auto":
        return mode
    device = getattr(llm, "device", None)
    return "device" if getattr(device, "type", None) == "cuda" else "host"


def tokens_from_answers(votes: Any, temperature: float, answers: Sequence[Any]) -> np.ndarray:
    """The tokens of one device-sampled step: a stored token as it is, a uniform u turned into
    the token on the votes' device by the exact float64 inverse CDF of softmax(votes / tau).

    Privacy: rho = (c/tau)^2 / 2 per fresh row, charged by the driver before u was drawn."""
    from dpsynrag.accounting.token_sampling import inverse_cdf_tokens

    if len(answers) != votes.shape[0]:
        raise RuntimeError("the driver answered another number of groups than asked")
    tokens = np.empty(len(answers), dtype=np.int64)
    fresh = [row for row, (stored, _value) in enumerate(answers) if not stored]
    for row, (stored, value) in enumerate(answers):
        if stored:
            tokens[row] = int(value)
    if fresh:
        uniforms = np.asarray([float(answers[row][1]) for row in fresh], dtype=np.float64)
        rows = votes if len(fresh) == len(answers) else votes[fresh]
        drawn, _fallbacks = inverse_cdf_tokens(rows, temperature, uniforms)
        tokens[fresh] = drawn
    return tokens
