"""Runners move data between the driver and the model workers; they compute nothing private.

``LocalRunner`` holds one ``ModelWorker`` in this process. ``RayRunner`` starts one worker
actor per GPU (or one per machine's CPUs when there is no GPU), local by default or on the
cluster of ``--ray-address``, shards the deterministic stages across them, and relays each
private-prediction step: the worker sends its summed clipped votes, the driver's sampler (the
ledger) releases the tokens, the runner sends them back; or, with device-side token sampling
(``token_sampling``, ``pipeline.worker``), the worker asks for the step's uniforms, the
driver's ledger charges the draws and draws them, and the worker's tokens come back to be
stored. All noise is drawn in the driver.

With several workers the driver answers whichever worker's votes arrive first, so the order of
the ledger's draws depends on timing; ``ordered=True`` (what a seeded build uses) answers the
workers in turn instead, so a seeded build draws the same values whatever the timing.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dpsynrag.models.lazy import LazyModels
from dpsynrag.models.protocols import LLM, IdentifiedEmbedder
from dpsynrag.pipeline.ray_lifeline import Lifeline
from dpsynrag.pipeline.worker import ModelWorker

if TYPE_CHECKING:  # the settings' module imports torch: annotations only
    from dpsynrag.transforms.public_prior import PublicPriorSettings

# votes (active groups x vocab, float64) and the active groups' global indices -> tokens;
# for device-side sampling it also needs draw_uniforms / record (PartitionTokenSampler's)
DriverSampler = Callable[[np.ndarray, list[int]], np.ndarray]
Progress = Callable[[int], None]

CHUNK_DOCS = 64  # documents per task for the sharded stages


class Runner(Protocol):
    """What the build and the evaluation call on a runner (``LocalRunner``, ``RayRunner``)."""

    def llm_identity(self) -> dict[str, Any]: ...
    def embedder_identity(self) -> dict[str, Any]: ...
    def llm_keywords(self, texts: Sequence[str], K: int, prompt: str | None,
                     progress: Progress) -> list[list[str]]: ...
    def embed(self, texts: Sequence[str], progress: Progress) -> np.ndarray: ...
    def self_filter(self, texts: Sequence[str], prompt: str | None,
                    progress: Progress) -> list[bool]: ...
    def predict(self, groups: Sequence[Sequence[str]], sampler: DriverSampler, *, prompt: str,
                max_new_tokens: int, clip: float, temperature: float,
                batch_rows: int | None, response_prefix: str | Sequence[str] = "",
                public_prior: PublicPriorSettings | None = None,
                token_sampling: str = "auto",
                released: Sequence[Sequence[int]] | None = None) -> list[str]: ...
    def close(self) -> None: ...


def _chunks(n: int, size: int = CHUNK_DOCS) -> list[range]:
    return [range(start, min(start + size, n)) for start in range(0, n, size)]


def _relay_prediction(worker_calls: list[tuple[Any, list[int]]], sampler: DriverSampler,
                      n_groups: int, get_next: Callable[[dict[int, Any]], tuple[int, tuple]],
                      send: Callable[[int, Any], None], request: Callable[[int], Any]) -> list[str]:
    """The driver loop shared by both runners: answer each worker's votes with tokens.

    ``get_next`` receives the pending requests by worker index and returns the index and the
    message of the one to handle next."""
    texts: list[str | None] = [None] * n_groups
    pending = {index: request(index) for index in range(len(worker_calls))}
    running = set(pending)  # workers whose engine has not ended
    try:
        while pending:
            index, message = get_next(dict(pending))
            del pending[index]
            shard = worker_calls[index][1]
            kind = message[0]
            if kind in ("done", "error", "cancelled"):
                running.discard(index)
            if kind == "votes":
                _, votes, active = message
                tokens = sampler(votes, [shard[i] for i in active])
                send(index, [int(t) for t in tokens])
                pending[index] = request(index)
            elif kind == "draw":
                _, active, temperature = message
                send(index, _device_draw(sampler, [shard[i] for i in active], temperature))
                pending[index] = request(index)
            elif kind == "drawn":  # the worker goes on; nothing to answer
                _, active, tokens = message
                sampler.record([shard[i] for i in active], tokens)  # type: ignore[attr-defined]
                pending[index] = request(index)
            elif kind == "done":
                for local, text in enumerate(message[1]):
                    texts[shard[local]] = text
            else:
                detail = message[1] if len(message) > 1 else kind
                raise RuntimeError(f"model worker failed: {detail}")
    except BaseException:
        for index in running:  # pending or waiting for this answer: each stops at its next
            send(index, None)
        raise
    return [t if t is not None else "" for t in texts]


def _device_draw(sampler: DriverSampler, active: list[int],
                 temperature: float) -> list[tuple[bool, float | int]]:
    """The ledger's answer to a worker's ``draw`` request (device-side token sampling)."""
    draw = getattr(sampler, "draw_uniforms", None)
    if draw is None:
        raise RuntimeError("this sampler cannot answer device-side token sampling; use "
                           "token_sampling='host'")
    if float(temperature) != float(sampler.temperature):  # type: ignore[attr-defined]
        raise RuntimeError("the worker samples at another temperature than the ledger charges")
    answers: list[tuple[bool, float | int]] = draw(active)
    return answers


def _next_in_turn(pending: Collection[int], last: int | None) -> int:
    """The worker handled next in ordered mode: the first pending index after ``last``,
    cyclically. Every worker has one request pending at a time, so its steps interleave as
    worker 0 step s, worker 1 step s, ..., worker 0 step s + 1: the order of one worker."""
    later = [index for index in pending if last is None or index > last]
    return min(later) if later else min(pending)


def _balanced_shards(groups: Sequence[Sequence[str]], n: int) -> list[list[int]]:
    """Contiguous shards of group indices with about equal row counts, one per worker and
    none empty (fewer shards only when there are fewer groups than workers).

    Cut ``j`` is the group boundary whose running row count is nearest ``j/n`` of the total,
    among the boundaries that leave every shard at least one group: one large group at the
    end gets a shard of its own instead of leaving the other workers idle."""
    n = min(n, len(groups))
    if n <= 1:
        return [list(range(len(groups)))]
    running = [0]
    for group in groups:
        running.append(running[-1] + max(1, len(group)))
    cuts = [0]
    for j in range(1, n):
        target = running[-1] * j / n
        allowed = range(cuts[-1] + 1, len(groups) - (n - j) + 1)
        cuts.append(min(allowed, key=lambda c: (abs(running[c] - target), c)))
    cuts.append(len(groups))
    return [list(range(a, b)) for a, b in itertools.pairwise(cuts)]


class LocalRunner:
    """Everything in this process: for laptops, tests and debugging (``--runner local``)."""

    def __init__(self, llm: LLM | str | None = None,
                 embedder: IdentifiedEmbedder | str | None = None, device: str | None = None,
                 dtype: str | None = None, *, models: LazyModels | None = None) -> None:
        """``llm``/``embedder``: paths, ``None`` (packaged) or loaded objects; or ``models``,
        the caller's own (the evaluation shares them with its answering step)."""
        self.worker = ModelWorker(llm, embedder, device, dtype, models=models)

    def llm_identity(self) -> dict[str, Any]:
        return self.worker.llm_identity()

    def embedder_identity(self) -> dict[str, Any]:
        return self.worker.embedder_identity()

    def llm_keywords(self, texts: Sequence[str], K: int, prompt: str | None,
                     progress: Progress) -> list[list[str]]:
        out: list[list[str]] = []
        for chunk in _chunks(len(texts)):
            out.extend(self.worker.llm_keywords([texts[i] for i in chunk], K, prompt))
            progress(len(chunk))
        return out

    def embed(self, texts: Sequence[str], progress: Progress) -> np.ndarray:
        parts = []
        for chunk in _chunks(len(texts), 256):
            parts.append(self.worker.embed([texts[i] for i in chunk]))
            progress(len(chunk))
        if not parts:
            return np.zeros((0, self.worker.embedder.dimension), dtype=np.float32)
        return np.concatenate(parts)

    def self_filter(self, texts: Sequence[str], prompt: str | None,
                    progress: Progress) -> list[bool]:
        out: list[bool] = []
        for chunk in _chunks(len(texts)):
            out.extend(self.worker.self_filter([texts[i] for i in chunk], prompt))
            progress(len(chunk))
        return out

    def predict(self, groups: Sequence[Sequence[str]], sampler: DriverSampler, *, prompt: str,
                max_new_tokens: int, clip: float, temperature: float,
                batch_rows: int | None, response_prefix: str | Sequence[str] = "",
                public_prior: PublicPriorSettings | None = None,
                token_sampling: str = "auto",
                released: Sequence[Sequence[int]] | None = None) -> list[str]:
        worker = self.worker
        worker.start_prediction(groups, prompt=prompt, max_new_tokens=max_new_tokens, clip=clip,
                                temperature=temperature, batch_rows=batch_rows,
                                response_prefix=response_prefix, public_prior=public_prior,
                                token_sampling=token_sampling, released=released)
        shard = list(range(len(groups)))
        try:
            return _relay_prediction(
                [(worker, shard)], sampler, len(groups),
                get_next=lambda _pending: (0, worker.next_request()),
                send=lambda _i, tokens: worker.give_tokens(tokens),
                request=lambda _i: None)
        finally:  # a cancelled engine stops at its next request: this worker is free again
            worker.join_prediction()

    def close(self) -> None:
        pass


_WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}


def _worker_env() -> dict[str, str]:
    """Environment for the model workers, minus what a Ray job's runtime_env already sets.

    Inside ``ray job submit`` Ray refuses to merge a job's runtime_env with one that sets the
    same variables again, so those the job sets are left to the job.
    """
    import json

    env = dict(_WORKER_ENV)
    for name in ("DPSYNRAG_CACHE_DIR", "HF_HOME"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    job = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if job:
        try:
            job_env = (json.loads(job).get("runtime_env") or {}).get("env_vars") or {}
        except (ValueError, AttributeError):
            job_env = {}
        env = {k: v for k, v in env.items() if k not in job_env}
    return env


@contextmanager
def _keep_signal_handlers() -> Iterator[None]:
    """``ray.init`` installs its own SIGTERM/SIGINT handlers (and a C++ one that aborts with a
    stack dump); put back the caller's, so SIGTERM still means "interrupted, resumable"."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _actor_layout(ray: Any, workers: int | None, device: str | None
                  ) -> tuple[int, dict[str, Any]]:
    """How many model actors, with which resources: one per free GPU, else CPU actors that
    share the free CPUs of one node (a Ray job's driver may hold some; an actor asking for a
    whole cluster's CPUs would never be placed).

    CPU actors get whole CPUs when there are enough (``cpus // count`` each), else equal
    fractions, rounded down to Ray's resource granularity (0.0001) so that ``count`` of them
    fit: ``--workers 2`` on a node with one free CPU gives two actors of 0.5 CPU."""
    free = ray.available_resources()
    gpus = int(free.get("GPU", 0)) if device in (None, "cuda") else 0
    count = workers or (gpus if gpus > 0 else 1)
    if gpus > 0:
        return count, {"num_gpus": 1, "num_cpus": 1}
    node_cpus = max((node.get("Resources", {}).get("CPU", 0) for node in ray.nodes()
                     if node.get("Alive")), default=1)
    available = min(free.get("CPU", 1), node_cpus)
    cpus = int(available)
    if cpus >= count:
        return count, {"num_cpus": cpus // count}
    share = math.floor(max(available, 1) / count * 10_000) / 10_000
    return count, {"num_cpus": max(share, 0.0001)}


# Ray puts Unix sockets under <temp dir>/session_<date>_<time>_<us>_<pid>/sockets/, and a
# socket path may hold at most 107 bytes: a longer temp dir than this cannot be used.
_RAY_TEMP_DIR_MAX_CHARS = 40


def private_ray_temp_dir(state_dir: Path | None) -> tuple[Path, bool]:
    """A 0700 directory for a local Ray cluster's sessions, logs, sockets and spilled objects.

    Objects that Ray spills or logs may hold private intermediates, and Ray's default
    ``/tmp/ray`` is shared by every user of the machine (measured: 0777 directories). The
    directory is ``<state dir>/ray`` when that path is short enough for Ray's socket names,
    else ``r`` in a fresh ``mkdtemp`` directory. Returns (path, temporary): a temporary one is
    removed, with its ``mkdtemp`` parent, when the runner closes.

    Ray makes the directory it is given 0777 (``ray.init`` and every worker process it starts
    do, "so others can use it"), so the privacy rests on its parent: the state directory and
    the ``mkdtemp`` directory are 0700, and nobody else can reach anything below them.
    :func:`make_private_again` sets the directory itself back to 0700 once the model actors
    are up, as the state directory's layout says.
    """
    if state_dir is not None:
        candidate = Path(state_dir).resolve() / "ray"
        if len(str(candidate)) <= _RAY_TEMP_DIR_MAX_CHARS:
            candidate.mkdir(mode=0o700, parents=True, exist_ok=True)
            candidate.chmod(0o700)
            return candidate, False
    path = Path(tempfile.mkdtemp(prefix="dpsr-ray-")) / "r"  # the mkdtemp parent is 0700
    path.mkdir(mode=0o700)
    return path, True


def make_private_again(temp_dir: Path) -> None:
    """Put a local Ray cluster's temp dir back to 0700 after Ray made it 0777 (Ray's own
    processes run as the owner and need no more)."""
    temp_dir.chmod(0o700)


def _starts_local_ray(address: str | None) -> bool:
    """True when ``ray.init(address)`` starts a new local cluster (nothing to connect to)."""
    return address in (None, "", "local") and not os.environ.get("RAY_ADDRESS")


class RayRunner:
    """Model workers as Ray actors: GPU actors where the cluster has GPUs, else CPU actors.

    ``workers`` actors (default: one per free GPU, else one), laid out by
    :func:`_actor_layout`. Private prediction splits the groups into one contiguous shard per
    actor (:func:`_balanced_shards`); the deterministic stages go to the actors in chunks.
    ``ordered`` answers the actors' votes in turn rather than as they arrive: the ledger's
    draws then come in an order fixed by the shards, whatever the timing, so a seeded build is
    reproducible; when each actor's engine holds all its groups at once, it is the order in
    which one actor asks for them. It keeps the driver's draws from overlapping the actors'
    compute, so only seeded builds use it (``make_runner``).

    A local cluster that this runner starts keeps its temp, log, socket and spill files in
    a 0700 directory (:func:`private_ray_temp_dir`), and its processes end with the runner's
    process, also when that is killed (``ray_lifeline``: Linux). A cluster it connects to
    (``--ray-address``) is a trust boundary the operator owns: its nodes see private
    documents and intermediates (runbooks/privacy-model.md).
    """

    def __init__(self, llm: str | None = None, embedder: str | None = None, *,
                 address: str | None = None, workers: int | None = None,
                 device: str | None = None, dtype: str | None = None,
                 state_dir: Path | None = None, ordered: bool = False) -> None:
        import ray

        # the module, untyped here: Ray's stubs pick get()'s list overload for an actor call
        self._ray: Any = ray
        self.ordered = ordered
        self._owns_ray = not ray.is_initialized()
        self._temp_dir: Path | None = None
        self._lifeline: Lifeline | None = None
        private_dir: Path | None = None  # the local cluster's temp dir, when we start one
        if self._owns_ray:
            extra: dict[str, Any] = {}
            if _starts_local_ray(address):
                # a cluster of our own: Ray turns token authentication on and warns about it
                # on the operator's terminal at every build; keep the protection, drop the
                # warning (an operator's RAY_AUTH_MODE is respected by Ray without one)
                import logging

                logging.getLogger(
                    "ray._private.authentication.authentication_token_setup").setLevel(
                    logging.ERROR)
                temp_dir, temporary = private_ray_temp_dir(state_dir)
                self._temp_dir = temp_dir if temporary else None
                extra["_temp_dir"] = str(temp_dir)
                private_dir = temp_dir
                # its processes end with this one, even after kill -9 (ray_lifeline)
                self._lifeline = Lifeline.start(temp_dir, temporary=temporary)
            try:
                with _keep_signal_handlers():
                    context = ray.init(
                        address=address, include_dashboard=False, configure_logging=True,
                        logging_level="warning",  # type: ignore[arg-type]  # a name is fine
                        log_to_driver=True, runtime_env={"env_vars": _worker_env()}, **extra)
            except BaseException:
                self._close_lifeline()
                raise
            session_dir = (getattr(context, "address_info", None) or {}).get("session_dir")
            if self._lifeline is not None and session_dir:
                self._lifeline.session(session_dir)
        count, options = _actor_layout(ray, workers, device)
        # Ray's stubs type an actor's methods as plain functions (no ``.remote``): handles are Any
        actor: Any = ray.remote(ModelWorker).options(**options, max_concurrency=1)
        self.workers: list[Any] = [actor.remote(llm, embedder, device, dtype)
                                   for _ in range(count)]
        ray.get([w.ping.remote() for w in self.workers])
        if private_dir is not None:  # after ray.init and the actors' processes made it 0777
            make_private_again(private_dir)

    def _map(self, method: str, texts: Sequence[str], progress: Progress,
             *args: Any) -> list[Any]:
        ray = self._ray
        chunks = _chunks(len(texts))
        refs = {}
        for n, chunk in enumerate(chunks):
            worker = self.workers[n % len(self.workers)]
            refs[getattr(worker, method).remote([texts[i] for i in chunk], *args)] = n
        results: list[Any] = [None] * len(chunks)
        remaining = list(refs)
        while remaining:
            ready, remaining = ray.wait(remaining, num_returns=1)
            n = refs[ready[0]]
            results[n] = ray.get(ready[0])
            progress(len(chunks[n]))
        return results

    def llm_identity(self) -> dict[str, Any]:
        return self._ray.get(self.workers[0].llm_identity.remote())

    def embedder_identity(self) -> dict[str, Any]:
        return self._ray.get(self.workers[0].embedder_identity.remote())

    def llm_keywords(self, texts: Sequence[str], K: int, prompt: str | None,
                     progress: Progress) -> list[list[str]]:
        return [kw for part in self._map("llm_keywords", texts, progress, K, prompt)
                for kw in part]

    def embed(self, texts: Sequence[str], progress: Progress) -> np.ndarray:
        parts = self._map("embed", texts, progress)
        if not parts:
            dim = self.embedder_identity()["dimension"]
            return np.zeros((0, dim), dtype=np.float32)
        return np.concatenate(parts)

    def self_filter(self, texts: Sequence[str], prompt: str | None,
                    progress: Progress) -> list[bool]:
        return [keep for part in self._map("self_filter", texts, progress, prompt)
                for keep in part]

    def predict(self, groups: Sequence[Sequence[str]], sampler: DriverSampler, *, prompt: str,
                max_new_tokens: int, clip: float, temperature: float,
                batch_rows: int | None, response_prefix: str | Sequence[str] = "",
                public_prior: PublicPriorSettings | None = None,
                token_sampling: str = "auto",
                released: Sequence[Sequence[int]] | None = None) -> list[str]:
        ray = self._ray
        shards = _balanced_shards(groups, len(self.workers))
        calls = [(self.workers[i], shard) for i, shard in enumerate(shards)]
        ray.get([worker.start_prediction.remote(
            [groups[g] for g in shard], prompt=prompt, max_new_tokens=max_new_tokens, clip=clip,
            temperature=temperature, batch_rows=batch_rows,
            response_prefix=response_prefix if isinstance(response_prefix, str)
            else [response_prefix[g] for g in shard],
            public_prior=None if public_prior is None else public_prior.subset(shard),
            token_sampling=token_sampling,
            released=None if released is None else [list(released[g]) for g in shard])
            for worker, shard in calls])
        owner: dict[Any, int] = {}
        last: list[int | None] = [None]

        def request(index: int) -> Any:
            ref = calls[index][0].next_request.remote()
            owner[ref] = index
            return ref

        def get_next(pending: dict[int, Any]) -> tuple[int, tuple]:
            if self.ordered:
                index = last[0] = _next_in_turn(pending, last[0])
                ref = pending[index]
            else:
                [ref], _ = ray.wait(list(pending.values()), num_returns=1)
            return owner.pop(ref), ray.get(ref)

        def send(index: int, tokens: Any) -> None:
            calls[index][0].give_tokens.remote(tokens)

        return _relay_prediction(calls, sampler, len(groups), get_next, send, request)

    def close(self) -> None:
        for worker in self.workers:
            self._ray.kill(worker)
        if self._owns_ray:
            self._ray.shutdown()
        self._close_lifeline()  # and whatever the shutdown left of the session
        if self._temp_dir is not None:  # a temporary one: r in its own mkdtemp directory
            shutil.rmtree(self._temp_dir.parent, ignore_errors=True)
            self._temp_dir = None

    def _close_lifeline(self) -> None:
        if self._lifeline is not None:
            self._lifeline.close()
            self._lifeline = None
