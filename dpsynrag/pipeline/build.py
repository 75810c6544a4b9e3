"""The DP-SynRAG build: stages (a)-(e) and emit, resumable from the state directory.

``run_build`` is the driver. It owns the ledger (and with it every noise draw); the runner
only moves documents to the model workers and their deterministic results back. The stages
(``pipeline.token_stages``, ``pipeline.facts_stages``) receive a ``BuildContext`` and return
a ``StageResult``; each stores its result in the state directory before the next starts
(``BuildState.checkpoint``), and every noisy value lives in the ledger, so a build killed at
any point and run again with the same options continues where it stopped and spends exactly
the rho of an uninterrupted build.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpsynrag import __version__
from dpsynrag.accounting.certificate import build_certificate, write_certificate
from dpsynrag.accounting.composition import records
from dpsynrag.accounting.conversions import Conversion, epsilon_for
from dpsynrag.accounting.corpus_ledger import (
    CorpusLedger,
    default_corpus_ledger_path,
    privacy_unit_definition,
)
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.planner import BudgetPlan, plan_budget, request_from_options
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.signing import default_key_path, find_public_key, sign_document
from dpsynrag.io.documents import pick_warning
from dpsynrag.io.fingerprint import input_fingerprint
from dpsynrag.io.output_files import output_file_hashes, sha256_file
from dpsynrag.io.reader import read_documents
from dpsynrag.io.units import bound_units
from dpsynrag.models.protocols import LLM, IdentifiedEmbedder
from dpsynrag.pipeline.beam_ingest import parse_beam_options, run_ingest
from dpsynrag.pipeline.config import BuildConfig
from dpsynrag.pipeline.context import BuildContext, ProgressFactory, StageResult, no_progress
from dpsynrag.pipeline.facts_stages import WRITER_PROMPT, facts_stages
from dpsynrag.pipeline.preflight import (
    PreflightError,
    check_writable_directory,
    load_signer,
    preload_models,
    required_free_bytes,
)
from dpsynrag.pipeline.runners import LocalRunner, RayRunner, Runner
from dpsynrag.pipeline.state import BuildState, OutputLock, default_state_dir
from dpsynrag.pipeline.token_stages import DEFAULT_REPHRASE_PROMPT, token_stages
from dpsynrag.prompts.templates import load_prompt
from dpsynrag.transforms.emit import write_output
from dpsynrag.transforms.ingest import IngestSettings
from dpsynrag.transforms.prediction_release import GROUP


class BuildError(RuntimeError):
    """The build cannot go on; the message is one line and holds no private data."""


@dataclass
class BuildSummary:
    """What the operator sees at the end (the documents' count stays on the operator's side)."""

    out_dir: str
    state_dir: str
    documents_in: int
    skipped: dict[str, int]
    clusters: int
    synthetic_texts: int
    kept_texts: int
    rho_spent: float
    epsilon: float
    delta: float
    conversion: str
    epsilon_other: dict[str, float]
    seeded: bool
    resumed: bool
    stage_seconds: dict[str, float] = field(default_factory=dict)
    signing_key_fingerprint: str = ""
    signing_key_created: bool = False
    # the signing key's public half, for 'dpsynrag verify --public-key' ("" when there is
    # no public key file next to the private key)
    signing_public_key: str = ""
    # HMAC-SHA256 of the exact input under the state directory's key: operator-side only
    # (the summary and the state), never in a released file.
    input_hmac_sha256: str = ""
    # the private corpus's lifetime spend after this build (its ledger: every build and query)
    corpus_ledger: str = ""
    lifetime_epsilon: float | None = None
    lifetime_delta: float | None = None
    lifetime_cap_epsilon: float | None = None
    # how a unit's records became one document (--unit-bound; None without --unit-column):
    # "concat" merges the records that skipped["unit_bound"] counts, "pick" leaves them out
    unit_bound: str | None = None
    # what the operator should know about this build (e.g. pick left out most records)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def make_plan(config: BuildConfig, vocab_size: int | None = None) -> Any:
    """The solved plan: a ``BudgetPlan`` (tokens) or a ``FactsBudgetPlan`` (facts), from the
    released options by ``planner.request_from_options`` (the rule ``verify`` re-plans by)."""
    request = request_from_options(config.released_options(), vocab_size=vocab_size,
                                   allow_large_epsilon=config.allow_large_epsilon)
    if request is None:  # pragma: no cover - released_options holds every planning option
        raise ValueError("the build's options lack a planning option")
    return plan_budget(request)


def make_runner(config: BuildConfig, llm: LLM | None = None,
                embedder: IdentifiedEmbedder | None = None,
                state_dir: Path | None = None) -> Runner:
    """``llm``/``embedder`` objects override the config's paths (in-process runs only).

    ``state_dir`` is the build's private state directory: a local Ray cluster keeps its
    session files (object spills, logs) under it, never in a shared ``/tmp``. A seeded (test)
    build answers its Ray actors in turn, so that its draws do not depend on their timing."""
    # --runner beam: the n-gram stages run on Beam (pipeline.beam_ngrams); the embedder of
    # the output, in this process
    if config.resolved_runner in ("local", "beam") or llm is not None or embedder is not None:
        return LocalRunner(llm if llm is not None else config.model,
                           embedder if embedder is not None else config.embedder,
                           config.device, config.dtype)
    return RayRunner(config.model, config.embedder, address=config.ray_address,
                     workers=config.workers, device=config.device, dtype=config.dtype,
                     state_dir=state_dir, ordered=config.seeded)


def run_build(input_path: str | Path, out_dir: Path, config: BuildConfig, *,
              state_dir: Path | None = None, signing_key: Path | None = None,
              force: bool = False, purge_state: bool = False,
              progress: ProgressFactory = no_progress, runner: Runner | None = None,
              log: Callable[[str], None] = lambda _m: None,
              corpus_ledger: Path | bool | None = None) -> BuildSummary:
    """Build the synthetic corpus of ``input_path`` into ``out_dir``. See the module docstring.

    The build's whole planned spend is charged to the private corpus's ledger
    (``corpus_ledger``: a path, None for the default path derived from ``input_path``, False
    for none) before any private computation; a resumed build finds its charge and pays
    nothing more, and a cap the build does not fit in refuses it (``BudgetRefusedError``).
    """
    started = time.monotonic()
    out_dir = Path(out_dir)
    check_output_location(out_dir)  # a mount point or a file: --force would not help
    if out_dir.exists() and not force:
        raise BuildError(f"{out_dir}: output directory exists; remove it or pass --force")
    plan = make_plan(config)
    docs = read_input(input_path, config, log)
    n_docs = len(docs.texts)
    # fail before spending (pipeline.preflight): key, output and state locations, disk, then
    # the models
    signer = load_signer(signing_key)
    needed = required_free_bytes(input_path)
    check_writable_directory(out_dir.expanduser().absolute().parent, needed, "output directory")
    state_path = state_dir or default_state_dir(out_dir)
    check_state_location(state_path, needed)
    # the state directory's lock first (its message names the usual case: the same build
    # started twice), then OUT's (another state directory writing the same OUT)
    with BuildState(state_path, config.fingerprint(), out_dir) as state, OutputLock(out_dir):
        resumed = state.resumed
        fingerprint = input_fingerprint(docs, state.fingerprint_key())
        recorded = state.load("input")
        if recorded is not None and recorded.get("fingerprint") != fingerprint:
            raise BuildError(f"{state.directory}: the input changed since this build started; "
                             "a changed corpus needs a fresh build (new --state-dir) and a "
                             "fresh budget")
        state.save("input", {"fingerprint": fingerprint})
        own_runner = runner is None
        runner = runner or make_runner(config, state_dir=state.directory)
        try:
            preload_models(runner, config.uses_llm)
            ledger_path = None
            if corpus_ledger is not False:
                ledger_path = charge_corpus_ledger(
                    input_path, config, plan, state,
                    None if corpus_ledger is None or corpus_ledger is True
                    else Path(corpus_ledger), out_dir)
            rng = secure_rng(config.seed) if config.seed is not None else None
            ledger = Ledger(state.ledger_path, rng=rng)
            ledger.record_target(config.delta, config.conversion)
            ledger.declare_parallel_group(
                GROUP, config.L, "DP-SynRAG soft clusters: each document in at most L clusters")
            context = BuildContext(config=config, plan=plan, ledger=ledger, state=state,
                                   runner=runner, progress=progress, log=log)
            warnings = input_warnings(config, docs)
            # the stages own the documents from here (the Beam path frees them once its
            # shards are written): this frame keeps only their count
            texts = docs.hand_over_texts()
            if config.generate == "facts":
                result = facts_stages(context, texts)
            else:
                result = token_stages(context, texts)
            del texts
            with state.timed("emit"):
                try:
                    _emit(context, out_dir, result, signer[0], force)
                except OSError as error:  # the budget is spent: say how to finish
                    raise BuildError(
                        f"{out_dir}: the corpus could not be written ({error.strerror or error})"
                        f"; the budget is spent and every released value is kept in "
                        f"{state.directory}: fix the location and run the same command again, "
                        f"or write elsewhere with --state-dir {state.directory} -o NEW_OUT "
                        "(nothing is spent again)") from None
        finally:
            if own_runner:
                runner.close()
        rho = ledger.total_rho()
        # approximate zCDP (the facts mode's phrase release): convert at delta - delta_A
        delta_conversion = config.delta - ledger.total_delta()
        conversion = Conversion(config.conversion)
        summary = BuildSummary(
            out_dir=str(out_dir), state_dir=str(state.directory), documents_in=n_docs,
            skipped=dict(docs.skipped), clusters=result.clusters,
            synthetic_texts=len(result.texts), kept_texts=int(sum(result.kept)),
            rho_spent=rho, epsilon=epsilon_for(rho, delta_conversion, conversion),
            delta=config.delta, conversion=conversion.value,
            epsilon_other={c.value: epsilon_for(rho, delta_conversion, c) for c in Conversion
                           if c != conversion},
            seeded=ledger.seeded, resumed=resumed, stage_seconds=state.stage_seconds,
            signing_key_fingerprint=signer[1], signing_key_created=signer[2],
            signing_public_key=str(find_public_key(signing_key or default_key_path()) or ""),
            input_hmac_sha256=fingerprint, unit_bound=unit_bound_rule(config),
            warnings=warnings)
        if ledger_path is not None:
            _add_lifetime_spend(summary, ledger_path, config.delta, config.conversion)
        ledger.close()
        if purge_state:
            state.purge()
    summary.stage_seconds["total"] = time.monotonic() - started
    return summary


def read_input(input_path: str | Path, config: BuildConfig,
               log: Callable[[str], None] = lambda _m: None) -> Any:
    """The build's documents, one per privacy unit (``InputDocuments``).

    ``config.ingest == "inline"`` reads them in this process; ``"beam"`` runs the Beam ingest
    job into a private temporary directory (0700, removed afterwards) and reads its shards;
    its input may then be any path or pattern Beam can read (``gs://...``). Both validate,
    normalise and bound units the same way.
    """
    import tempfile

    if config.ingest == "inline":
        docs = read_documents(Path(input_path), text_column=config.text_column,
                              id_column=config.id_column, unit_column=config.unit_column,
                              max_chars=config.max_chars)
        if config.unit_column:
            docs = bound_units(docs, config.unit_bound, config.max_chars)
        return docs

    settings = IngestSettings(text_column=config.text_column, id_column=config.id_column,
                              unit_column=config.unit_column, max_chars=config.max_chars,
                              unit_bound=config.unit_bound)
    scratch = Path(tempfile.mkdtemp(prefix="dpsynrag-ingest-"))
    try:
        report = run_ingest(input_path, scratch / "shards", settings,
                            runner=config.beam_runner,
                            beam_options=parse_beam_options(config.beam_options),
                            on_bad_row=config.on_bad_row, log=log)
        docs = read_documents(scratch / "shards", unit_column="unit", max_chars=None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    docs.skipped = dict(report.skipped)
    if report.bad_rows:
        docs.skipped["bad_row"] = report.bad_rows
    return docs


def unit_bound_rule(config: BuildConfig) -> str | None:
    """How a unit's records became one document: ``--unit-bound`` with a ``--unit-column``,
    else None (every record is a unit: nothing merged or left out)."""
    return config.unit_bound if config.unit_column else None


def input_warnings(config: BuildConfig, docs: Any) -> list[str]:
    """What the operator should know about how the input was read (``pick_warning``: only
    counts the build's summary shows already)."""
    warning = pick_warning(unit_bound_rule(config), len(docs.texts), docs.skipped)
    return [warning] if warning else []


def corpus_ledger_mechanisms(config: BuildConfig, plan: Any) -> list[dict[str, Any]]:
    """The build's planned releases as corpus-ledger mechanisms (costs recomputed there).

    Written from the plan's own description of the build (``plan.events``): the clusters
    compose by overlapping parallel composition, their cost is at most L times one cluster's
    (every cluster has the same parameters), so L copies of one cluster's releases are
    charged: exactly the build ledger's total.
    """
    return records(plan.events(config.clip))

#: The lifetime cap a corpus ledger gets at its first build charge, in units of that build's
#: epsilon (at its delta and conversion): room for a rebuild or a few queries, not for nine
#: silent rebuilds (measured before: nine builds of one input reached epsilon 43.3).
DEFAULT_LIFETIME_FACTOR = 2.0


def _add_lifetime_spend(summary: BuildSummary, ledger_path: Path, delta: float,
                        conversion: str) -> None:
    """The corpus's lifetime spend (all its builds and queries), at the cap's delta and
    conversion, else at this build's delta plus the approximate deltas charged so far and
    this build's conversion."""
    with CorpusLedger(ledger_path) as corpus:
        spent = corpus.spent()
        cap = corpus.cap
        if spent.epsilon is None:
            spent = corpus.spent(delta=min(delta + spent.delta_approx, 0.5),
                                 conversion=conversion)
    summary.corpus_ledger = str(ledger_path)
    summary.lifetime_epsilon = spent.epsilon
    summary.lifetime_delta = spent.delta
    summary.lifetime_cap_epsilon = None if cap is None else cap.epsilon


def charge_corpus_ledger(input_path: str | Path, config: BuildConfig, plan: BudgetPlan,
                         state: BuildState, ledger_path: Path | None,
                         out_dir: Path | None = None) -> Path:
    """Charge the build to the private corpus's ledger once per state directory; returns the
    ledger's path.

    The charge's description names the config fingerprint, the input path and the output
    directory (paths, never content), so successive builds of a changing corpus can be told
    apart in ``dpsynrag ledger show``.
    """
    import uuid

    recorded = state.load("corpus_ledger") or {}
    build_id = recorded.get("build_id") or uuid.uuid4().hex
    state.save("corpus_ledger", {"build_id": build_id})
    path = ledger_path or default_corpus_ledger_path(input_path)
    with CorpusLedger(path) as ledger:
        if ledger.cap is None and not ledger.cap_history() and not ledger.entries():
            # the corpus's first charge: a lifetime cap comes with it (issue 16), so repeated
            # builds cannot add up in silence; 'dpsynrag ledger cap' changes it
            ledger.set_cap(DEFAULT_LIFETIME_FACTOR * config.epsilon, config.delta,
                           config.conversion)
        ledger.charge(f"build/{build_id}", kind="build", method="dp-synrag",
                      mechanisms=corpus_ledger_mechanisms(config, plan),
                      privacy_unit=privacy_unit_definition(config.unit_column,
                                                           config.unit_bound),
                      description=f"config {config.fingerprint()[:16]}; input {input_path}"
                                  + (f"; out {out_dir}" if out_dir is not None else ""))
    return Path(path)


def check_state_location(state_dir: Path, needed_bytes: int = 0) -> None:
    """Refuse, before anything is spent, a state directory the build cannot use: an existing
    file, a directory (or a parent) that cannot be created or written (read-only, not the
    owner's, a file in the way), or one with less than ``needed_bytes`` free. One line naming
    the directory, what is wrong and the option that moves it."""
    path = state_dir.expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise BuildError(f"{state_dir}: exists and is not a directory; choose another "
                         "--state-dir (nothing was spent)")
    try:
        check_writable_directory(path, needed_bytes, "state directory")
    except PreflightError as error:
        raise PreflightError(f"{error}; choose a writable --state-dir (nothing was "
                             "spent)") from None


def check_output_location(out_dir: Path) -> None:
    """Refuse, before anything is spent, an output path the corpus cannot be renamed onto: an
    existing file, or a mount point (the corpus is written beside OUT and renamed into place,
    which a mount point refuses)."""
    path = out_dir.expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise BuildError(f"{out_dir}: exists and is not a directory; choose another -o "
                         "(nothing was spent)")
    if path.is_dir() and os.path.ismount(path):
        raise BuildError(f"{out_dir}: is a mount point, which a finished corpus cannot replace; "
                         f"write into a directory inside it, e.g. -o {out_dir}/corpus "
                         "(nothing was spent)")


# ---------------------------------------------------------------------- emit
def _emit(context: BuildContext, out_dir: Path, result: StageResult, private_key: Any,
          force: bool) -> None:
    """Write the corpus, its index and its signed certificate into ``out_dir`` (atomically:
    a partial directory renamed into place)."""
    config, plan, ledger, runner = context.config, context.plan, context.ledger, context.runner
    out_dir = out_dir.expanduser().absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    partial = out_dir.with_name(f".{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        # the embedder's vectors of every text: the long part of the output (10^6 notes on
        # 2 CPU cores: about 10 minutes), hence its own progress bar
        with context.progress("(emit) the corpus and its index", len(result.texts)) as advance:
            embedder = _EmbedderProxy(runner, advance)
            manifest = write_output(
                partial, texts=result.texts, cluster_keywords=result.cluster_keywords,
                kept=result.kept, token_counts=result.tokens, embedder=embedder)
        del manifest
        files = output_file_hashes(partial)
        llm_identity = {"name": "none", "note": "--generate facts uses no language model"} \
            if not config.uses_llm else \
            {k: v for k, v in runner.llm_identity().items() if k != "eos_token_ids"}
        certificate = build_certificate(
            ledger, delta=config.delta, conversion=config.conversion, plan=plan.as_dict(),
            model_identity=llm_identity, embedder_identity=runner.embedder_identity(),
            vocabulary_sha256=result.vocabulary_sha256,
            output_files=files, seeded=ledger.seeded, package_version=__version__,
            created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            config=_public_config(config))
        write_certificate(partial, sign_document(certificate, private_key))
        if out_dir.exists():
            if not force:  # created while this build ran: never delete what we did not own
                raise BuildError(
                    f"{out_dir}: the output directory appeared while the build ran and is left "
                    "as it is; run the same command with --force or another -o to write the "
                    "corpus (released values are read back: nothing is spent again)")
            shutil.rmtree(out_dir)
        os.replace(partial, out_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


#: The token-mode options a facts build with ``--writer tokens`` reads (config.BuildConfig).
FACTS_WRITER_OPTIONS = ("T", "clip", "rephrase_prompt", "response_prefix", "public_top_k",
                        "public_temperature")


def _public_config(config: BuildConfig) -> dict[str, Any]:
    """The released options plus the hashes of the prompts actually used and the identity of
    the public word-frequency prior (all public). A facts build records the token-mode
    options only where its writer reads them, and its keyword source (statistical)."""
    import hashlib

    public = dict(config.released_options())
    # Never released: the seed regenerates the whole noise stream (a seeded build's
    # certificate says only ``seeded: true``), and model paths name operator-side
    # directories (the certificate's ``models`` section names the weights and their sha256).
    public.pop("seed", None)
    for name in ("model", "embedder"):
        if public.get(name) is not None:
            public[name] = Path(str(public[name])).name
    if config.generate == "facts":
        kept = FACTS_WRITER_OPTIONS if config.facts_writer_tokens else ()
        for name in config.TOKENS_ONLY:
            if name not in kept:
                public.pop(name, None)
        public["keywords"] = "statistical"  # (a) and (f1): rules of the document and wordfreq
        prompts = {"writer": config.rephrase_prompt or WRITER_PROMPT} \
            if config.facts_writer_tokens else {}
    else:
        prompts = {
            "rephrase": config.rephrase_prompt or DEFAULT_REPHRASE_PROMPT,
            "keywords": config.keyword_prompt or load_prompt("keywords"),
            "self_filter": config.filter_prompt or load_prompt("self_filter"),
        }
    if prompts:
        public["prompt_sha256"] = {name: hashlib.sha256(text.encode()).hexdigest()
                                   for name, text in prompts.items()}
    if public.get("keywords") == "statistical":
        public.update(word_frequency_prior())
    return public


@functools.lru_cache(maxsize=1)
def word_frequency_prior() -> dict[str, str]:
    """The identity of the public word-frequency prior the statistical keywords and the facts
    mode's terms read: wordfreq's version and the sha256 of its English list (``wordlist
    "best"``, the one ``zipf_frequency`` and ``get_frequency_dict`` load)."""
    from importlib.metadata import version

    from wordfreq import available_languages

    return {"keyword_prior": f"wordfreq {version('wordfreq')} zipf_frequency(en)",
            "keyword_prior_sha256": sha256_file(Path(available_languages("best")["en"]))}


class _EmbedderProxy:
    """Looks like a LoadedEmbedder to ``write_output``; embeds through the runner."""

    def __init__(self, runner: Runner, progress: Callable[[int], None]) -> None:
        self._runner = runner
        self._progress = progress
        self.identity = runner.embedder_identity()

    @property
    def name(self) -> str:
        return str(self.identity.get("name", ""))

    @property
    def dimension(self) -> int:
        return int(self.identity["dimension"])

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        return self._runner.embed(texts, self._progress)

