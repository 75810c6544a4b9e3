"""The model worker: holds the LLM and the embedder once, computes deterministic functions.

A worker never draws noise. For private prediction it runs the engine in a background thread
whose sampler hands each step's summed clipped votes to the driver (``next_request``) and
waits for the tokens the driver's ledger released (``give_tokens``). The same class runs
in-process (``--runner local``) or as a Ray actor (``ray.remote(ModelWorker)``).
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
        self._answers: queue.Queue[list[int] | None] = queue.Queue()
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
                         public_prior: PublicPriorSettings | None = None) -> None:
        """Start the engine on ``groups``; its votes come out of ``next_request``."""
        # loads torch and transformers: imported when this runs, not with this module
        from dpsynrag.transforms.private_prediction import private_predict

        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("a prediction is already running in this worker")
        self._requests, self._answers = queue.Queue(), queue.Queue()
        requests, answers = self._requests, self._answers

        def sampler(votes: Any, active: list[int]) -> np.ndarray:
            array = votes.detach().to("cpu").double().numpy() if hasattr(votes, "detach") \
                else np.asarray(votes, dtype=np.float64)
            requests.put(("votes", array, [int(i) for i in active]))
            answer = answers.get()
            if answer is None:
                raise _Cancelled
            return np.asarray(answer, dtype=np.int64)

        def run() -> None:
            try:
                texts = private_predict(
                    self.llm, [list(g) for g in groups], prompt=prompt,
                    max_new_tokens=max_new_tokens, clip=clip, temperature=temperature,
                    rng=None, batch_rows=batch_rows, sampler=sampler,  # type: ignore[arg-type]
                    response_prefix=response_prefix, public_prior=public_prior)
                requests.put(("done", texts))
            except _Cancelled:
                requests.put(("cancelled",))
            except BaseException as error:  # reported to the driver as one line
                requests.put(("error", f"{type(error).__name__}: {error}"))

        self._thread = threading.Thread(target=run, name="private-prediction", daemon=True)
        self._thread.start()

    def next_request(self) -> tuple[Any, ...]:
        """``("votes", votes, active)``, ``("done", texts)`` or ``("error", message)``."""
        return self._requests.get()

    def give_tokens(self, tokens: Sequence[int] | None) -> None:
        """The released tokens for the last votes (``None`` cancels the prediction)."""
        self._answers.put(None if tokens is None else [int(t) for t in tokens])
