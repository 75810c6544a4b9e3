"""``build-corpus --runner beam``: the n-gram stages (``facts.span_corpus``) on Apache Beam.

The same stages as ``facts.span_corpus.span_corpus``, with every per-document rule run in
Beam workers and every count combined by Beam; the driver keeps only public values and the
ledger. One code path for the rules: the workers call the very functions the local build
calls, on batches of ``batch_size`` documents (a public number):

* ``facts.tokens.tokenize`` (once; the token lists are kept in private shards under the state
  directory, never in the driver);
* per n-gram level: ``facts.ngrams.level_choices`` (candidates and each document's choice,
  ``document_key`` for the tie order; level j reads level j - 1's released set, a public
  value shipped with the pipeline) and ``facts.ngrams.level_counts`` (weighted or uniform
  counts, which refuse a document over its bound), then ``beam.CombinePerKey(sum)`` over the
  batches. A level's counts are a sum over documents, so the combined counts are exactly the
  local build's;
* after the levels: ``facts.span_corpus.document_items`` and
  ``facts.fact_clusters.anchor_clusters`` (each document's items and clusters, a rule of the
  document and released values) and ``facts.fact_clusters.sparse_fact_counts`` (the cells
  each document adds to the span histograms, checked by ``contributions.bounded_cells``
  against the cap K' and the L the ledger declares for the group), summed per (cluster,
  span) by ``beam.CombinePerKey(merge_cell_parts)`` over arrays of block-local cells (int32)
  and their sums (int32, int64 in a part whose sums pass 2^31), one part per batch and
  block of ``ROWS_PER_KEY`` clusters (fewer for a very wide domain: ``block_rows``; a
  shuffle of one element per cell held about 7 GB of the DirectRunner's driver at 10^6
  documents; arrays hold 8 bytes a cell). No number of documents overflows a sum, so the
  Beam path refuses no size of input.

Between the passes the driver reads the combined exact counts from private files under the
state directory (deleted once read) into the ledger's draw only: each level is one
``release_partitions`` / ``release_weighted_partitions`` call, the span histograms one
``Ledger.release_many`` per 32 clusters, with the charges, keys and order of the local build
(``ngrams.ledger_release``, ``fact_clusters.release_kept_counts``, the very function the local
build's ``release_span_histograms`` calls), so a seeded build releases the same values on both
paths (``tests/test_beam_ngrams.py``) and a resumed one gets its stored values back, undrawn.
The combined cells stay sparse (``fact_clusters.SparseCounts``, the non-zero cells only) into
the release, which draws of each row's discrete Gaussian release on every entry of D its
spans at or above ``KEEP_Z`` sigma_C (post-processing), with exactly their law under the full
draw and without a draw per entry (``accounting.sparse_noise``): the driver never holds a
clusters x |D| table. Nothing here logs a count, an n-gram or a text; an error
inside a worker reaches the driver as its exception's type only (a message could hold private
text), except a ``ContributionError``, whose message holds public bounds only.

Runners: ``direct`` (default) is Beam's embedded engine (the DirectRunner's batch engine,
``FnApiRunner``) with one worker process per core (``--workers`` to choose); any other name
(``PortableRunner``, ``FlinkRunner``, ``SparkRunner``) goes to Beam with ``--beam-options``
(``runbooks/beam-cluster.md``). The scratch files live under the state directory, which the
workers of a cluster must see at the same path.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shlex
import shutil
import sys
import traceback
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpsynrag.accounting.contributions import ContributionError, declared_overlap
from dpsynrag.facts.anchor_choice import Embed
from dpsynrag.facts.fact_clusters import (
    GROUP,
    GROUP_DESCRIPTION,
    AnchorRanks,
    KeptCounts,
    SparseCounts,
    document_clusters,
    release_kept_counts,
    sparse_fact_counts,
)
from dpsynrag.facts.leftover_notes import leftover_notes
from dpsynrag.facts.ngrams import (
    _check_lengths,
    document_key,
    level_caps,
    level_choices,
    level_counts,
    level_keys,
    merge_pass,
    release_level_counts,
)
from dpsynrag.facts.span_corpus import (
    SpanCorpus,
    SpanSettings,
    anchor_priority,
    anchors_of,
    document_items,
    span_domain,
    span_shape,
)
from dpsynrag.facts.span_notes import KEEP_Z, span_notes
from dpsynrag.facts.span_releases import LedgerReleases
from dpsynrag.facts.spans import is_content
from dpsynrag.facts.tokens import tokenize

__all__ = ["BATCH_DOCUMENTS", "BeamStageError", "beam_span_corpus"]

#: documents per batch: what one worker holds of the documents at a time (public)
BATCH_DOCUMENTS = 1000
#: documents per call of ``sparse_fact_counts`` inside a batch
FACT_CHUNK = 250
#: clusters per key of the span-histogram combine: a worker's batch yields one array part
#: per block of this many cluster rows, so the shuffle holds arrays, never a cell apiece
ROWS_PER_KEY = 256
#: clusters per ledger transaction, as ``release_fact_histograms``
HISTOGRAM_BATCH = 32
SCRATCH = "beam-ngrams"


class BeamStageError(RuntimeError):
    """A Beam pass of the n-gram stages failed (one line; no private text)."""


# ------------------------------------------------------------------ worker functions
def _is_public(stop: Collection[str], token: str) -> bool:
    # the local build's ``public=lambda token: not is_content(token, stop)``
    return not is_content(token, stop)


def _guarded(what: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` whose errors leave the worker as their type only (a message or a
    traceback's locals could hold a document's words), a ContributionError (public bounds
    only) with its message."""
    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except ContributionError as error:
            raise BeamStageError(f"{what}: {error}") from None
        except Exception as error:  # replaced by its type only
            raise BeamStageError(f"{what}: {type(error).__name__} (message withheld: it may "
                                 "hold private text; rerun with --runner local --debug on "
                                 "a private machine to see it)") from None
    return run


def tokenize_batch(line: str) -> list[tuple[str, ...]]:
    """One batch of texts (a JSON list) -> their token sequences (``facts.tokens``)."""
    return [tokenize(text) for text in json.loads(line)]


def level_batch_counts(batch: Sequence[Sequence[str]], *, length: int,
                       previous: Mapping[str, int] | None, previous_length: int | None,
                       cap: int, weight_scale: int | None,
                       stop: Collection[str]) -> list[tuple[str, int]]:
    """A batch's part of one level's counts: each document's choice (``level_choices``, the
    local build's function) counted by ``level_counts`` (which checks every document)."""
    keys = [document_key(tokens) for tokens in batch]
    choices = level_choices(batch, length, previous, previous_length, cap, keys,
                            functools.partial(_is_public, stop))
    return list(level_counts(choices, cap, weight_scale).items())


def fact_batch_cells(batch: Sequence[Sequence[str]], *,
                     released_levels: Mapping[int, Mapping[str, int]],
                     domain_index: Mapping[str, int], released: Mapping[str, int],
                     ranks: AnchorRanks, cap: int, L: int, max_overlap: int, width: int,
                     stop: Collection[str],
                     weight_scale: int | None = None) -> list[tuple[int, CellPart]]:
    """A batch's cells of the span histograms and their counts, one part per block of
    ``block_rows`` clusters (the key; ``CellPart``: block-local cells): its documents' items
    (``document_items``) and clusters (``document_clusters``, the rule of
    ``anchor_clusters``, the clusters' order computed once: ``ranks``), counted by
    ``sparse_fact_counts`` on the clusters and spans the documents touch, with the local
    build's checks (<= ``cap`` spans per cluster row, <= ``max_overlap`` clusters per
    document), weighted as the local build's with ``weight_scale`` (a document's weight
    depends on its own spans only, so a chunk's local domain gives it the same)."""
    cell_parts: list[np.ndarray] = []
    value_parts: list[np.ndarray] = []
    shape = functools.cache(functools.partial(span_shape, stop=stop))
    for start in range(0, len(batch), FACT_CHUNK):
        chunk = batch[start:start + FACT_CHUNK]
        items = [document_items(tokens, released_levels, domain_index, released, cap, stop,
                                shape) for tokens in chunk]
        joined: dict[int, list[int]] = {}
        for d, held in enumerate(items):
            for r in document_clusters(held, ranks, L):
                joined.setdefault(r, []).append(d)  # d ascends: each member list is sorted
        rows = sorted(joined)
        if not rows:
            continue
        local_domain = sorted({item for held in items for item in held})
        counts = sparse_fact_counts([joined[r] for r in rows], items, local_domain, cap,
                                    max_overlap=max_overlap, weight_scale=weight_scale)
        columns = np.asarray([domain_index[item] for item in local_domain], dtype=np.int64)
        row_of = np.repeat(np.asarray(rows, dtype=np.int64), np.diff(counts.indptr))
        cell_parts.append(row_of * width + columns[counts.indices])
        value_parts.append(np.asarray(counts.values, dtype=np.int64))
    if not cell_parts:
        return []
    cells = np.concatenate(cell_parts)
    values = np.concatenate(value_parts)
    span = block_span(width)
    block = cells // span
    order = np.argsort(cells, kind="stable")
    cells, values, block = cells[order], values[order], block[order]
    bounds = np.flatnonzero(np.diff(block)) + 1
    starts = [0, *bounds.tolist()]
    stops = [*bounds.tolist(), len(cells)]
    return [(int(block[a]), merge_cell_parts([(cells[a:b] - int(block[a]) * span,
                                                values[a:b])]))
            for a, b in zip(starts, stops, strict=True)]


#: (cells of one block, their counts): cells int32, ascending and distinct, each cell
#: (r - first row of the block) |D| + j for the block's cluster row r and span j; counts
#: int32 where every sum of the part fits, else int64 (a sum is at most the documents
#: times the largest span weight, S = 256: int64 holds that for any collection that can
#: exist, so no size of input is refused)
CellPart = tuple[np.ndarray, np.ndarray]
#: the largest block-local cell a part holds (int32)
PART_LIMIT = int(np.iinfo(np.int32).max)


def block_rows(width: int) -> int:
    """Cluster rows per block of the span-histogram combine: ``ROWS_PER_KEY``, fewer where
    the domain is so wide that a block's cells would not fit int32 (a public function of
    the released domain's width). Refuses a domain wider than int32 itself: two billion
    released spans, which no build's memory holds."""
    width = max(int(width), 1)
    if width - 1 > PART_LIMIT:
        raise ValueError(f"a span domain of {width} n-grams is too wide for the Beam path; "
                         "use --runner local")
    return max(1, min(ROWS_PER_KEY, (PART_LIMIT + 1) // width))


def block_span(width: int) -> int:
    """Cells per block (``block_rows`` cluster rows of ``width`` spans): at most 2^31."""
    return block_rows(width) * max(int(width), 1)


def merge_cell_parts(parts: Iterable[CellPart]) -> CellPart:
    """Parts of one block's span-histogram cells summed into one (cells ascending,
    distinct): the combine of ``fact_batch_cells``' parts (associative and commutative, so
    Beam may apply it to any grouping of the parts, partial results included). Arrays, not
    one element per cell: what a runner's shuffle holds is 8 bytes a cell (int32 cells and
    sums; ``narrow_counts``: a part whose sums pass 2^31 keeps them int64, so no number of
    documents overflows)."""
    listed = list(parts)
    if not listed:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    cells = np.concatenate([np.asarray(c) for c, _ in listed]).astype(np.int32, copy=False)
    values = np.concatenate([np.asarray(v) for _, v in listed]).astype(np.int64, copy=False)
    if cells.size > 1 and not bool(np.all(cells[1:] >= cells[:-1])):  # sorted: no sort
        order = np.argsort(cells, kind="stable")
        cells, values = cells[order], values[order]
    if cells.size == 0:
        return cells, narrow_counts(values)
    starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
    return cells[starts], narrow_counts(np.add.reduceat(values, starts))


def narrow_counts(values: np.ndarray) -> np.ndarray:
    """Exact counts as int32 where every one fits (half the memory), else as int64."""
    values = np.asarray(values, dtype=np.int64)
    if values.size == 0 or int(values.max()) <= PART_LIMIT:
        return values.astype(np.int32)
    return values


def _dump_pair(pair: tuple[Any, int]) -> str:
    return json.dumps([pair[0], int(pair[1])])


def _dump_cell_part(pair: tuple[int, CellPart]) -> str:
    cells, values = pair[1]
    return json.dumps([int(pair[0]), np.asarray(cells).tolist(), np.asarray(values).tolist()])


def _dump_tokens(batch: list[tuple[str, ...]]) -> str:
    return json.dumps(batch)


def _load_tokens(line: str) -> list[tuple[str, ...]]:
    return [tuple(tokens) for tokens in json.loads(line)]


# ------------------------------------------------------------------ running a pass
#: the workers' own log: errors only (Beam's INFO lines name files and shards, no data)
QUIET_WORKERS = "--default_sdk_harness_log_level=ERROR"


class _Passes:
    """Runs the Beam passes of one build in ``scratch`` (private, under the state dir)."""

    def __init__(self, scratch: Path, runner: str, beam_options: Sequence[str],
                 workers: int | None, worker_log: Path) -> None:
        from dpsynrag.pipeline.beam_ingest import _pipeline_options, quiet_beam

        self.beam = quiet_beam()
        flags = list(beam_options)
        if not any(f.startswith("--default_sdk_harness_log_level") for f in flags):
            flags = [QUIET_WORKERS, *flags]
        self.scratch = scratch
        self.worker_log = worker_log
        self.direct = runner == "direct"
        if self.direct:
            from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

            self.options = PipelineOptions(flags=flags)
            direct = self.options.view_as(DirectOptions)
            if not any(f.startswith("--direct_num_workers") for f in flags):
                direct.direct_num_workers = int(workers or os.cpu_count() or 1)
            self.runner: Any = None
        else:
            self.runner, self.options = _pipeline_options(runner, flags)

    def _direct_runner(self) -> Any:
        """Beam's embedded engine; with several workers, one process each (threads of one
        process corrupted bundles under load: ``beam_ingest``), whose own output (Beam's
        import warnings) goes to ``worker_log`` in the state directory."""
        from apache_beam.options.pipeline_options import DirectOptions
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
        from apache_beam.transforms import environments

        direct = self.options.view_as(DirectOptions)
        if direct.direct_num_workers == 1 or direct.direct_running_mode != "in_memory":
            return FnApiRunner()
        command = (f"{shlex.quote(sys.executable)} -m apache_beam.runners.worker."
                   f"sdk_worker_main >> {shlex.quote(str(self.worker_log))} 2>&1")
        return FnApiRunner(default_environment=environments.SubprocessSDKEnvironment
                           .from_command_string(command_string=command))

    def pattern(self, name: str) -> str:
        return str(self.scratch / name / "part*")

    def prefix(self, name: str) -> str:
        (self.scratch / name).mkdir(mode=0o700, exist_ok=True)
        return str(self.scratch / name / "part")

    def run(self, what: str, build: Callable[[Any], None]) -> None:
        """Run one pipeline; a failure is one line without the worker's message."""
        beam = self.beam
        try:
            runner = self._direct_runner() if self.direct else self.runner
            with beam.Pipeline(runner=runner, options=self.options) as pipeline:
                build(pipeline)
        except BeamStageError:
            raise
        except Exception as error:  # Beam wraps the worker's error
            text = "".join(traceback.format_exception_only(type(error), error))
            marker = f"{BeamStageError.__name__}: "
            if marker in text:  # ours: already free of private text
                line = text[text.index(marker) + len(marker):].splitlines()[0]
                raise BeamStageError(line) from None
            raise BeamStageError(f"the Beam pass '{what}' failed ({type(error).__name__}; "
                                 "details withheld)") from None

    def read_lines(self, name: str) -> Iterator[Any]:
        """The combined output of a pass, one JSON value a line, from its private files
        (removed afterwards)."""
        folder = self.scratch / name
        for path in sorted(folder.glob("part*")):
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    yield json.loads(line)
        shutil.rmtree(folder, ignore_errors=True)

    def read_pairs(self, name: str) -> Iterator[tuple[Any, int]]:
        """The combined counts of a pass, (key, count) a line."""
        for key, value in self.read_lines(name):
            yield key, int(value)


def _write_input(texts: Iterable[str], folder: Path, batch_size: int, shards: int) -> int:
    """The texts as JSON lines of ``batch_size`` texts, ``shards`` files; returns the
    number of batches."""
    folder.mkdir(mode=0o700)
    handles = [open(folder / f"part-{s:05d}", "w", encoding="utf-8")  # noqa: SIM115
               for s in range(shards)]
    batches = 0
    try:
        batch: list[str] = []
        for text in texts:
            batch.append(text)
            if len(batch) == batch_size:
                handles[batches % shards].write(json.dumps(batch) + "\n")
                batches, batch = batches + 1, []
        if batch:
            handles[batches % shards].write(json.dumps(batch) + "\n")
            batches += 1
    finally:
        for handle in handles:
            handle.close()
    return batches


# ------------------------------------------------------------------ the releases
def _release_level(releases: LedgerReleases, key: str, counts: Mapping[str, int],
                   max_items: int) -> dict[str, int]:
    """One level through the ledger: the local build's own release of a level's counts
    (``ngrams.release_level_counts``), here the workers' checked sums."""
    return release_level_counts(releases.ledger, key, counts, max_items,
                                sigma=releases.sigma_levels, delta=releases.level_delta,
                                weight_scale=releases.weight_scale)


def _release_histograms(releases: LedgerReleases, counts: SparseCounts, domain: Sequence[str],
                        max_items: int, progress: Callable[[int], None] | None) -> KeptCounts:
    """Every cluster's span histogram through the ledger: the local build's own release of a
    counted sparse table (``fact_clusters.release_kept_counts``), ``HISTOGRAM_BATCH``
    clusters per transaction, each noisy row kept at ``KEEP_Z`` sigma_C as it is drawn."""
    sigma = float(releases.sigma_clusters)
    return release_kept_counts(releases.ledger, counts, domain, sigma=sigma,
                               max_items=max_items, floor=KEEP_Z * sigma, group=GROUP,
                               batch_size=HISTOGRAM_BATCH, progress=progress,
                               weight_scale=releases.span_weight_scale)


def _read_cells(parts: Iterable[Any], n_rows: int, width: int) -> SparseCounts:
    """The combined cells of the span histograms as a sparse table: one combined part per
    block of clusters (``merge_cell_parts``; lines ``[block, cells, counts]``), so the
    parts' cells are distinct, each part ascending and the blocks disjoint ranges. Put in
    block order, they are ascending as a whole: ``SparseCounts.from_cells`` takes them
    without a sort, and each list of parts is freed as soon as it is joined (memory: about
    16 bytes a cell at the peak and 8 while the parts are read, not 72)."""
    span = block_span(width)
    listed: list[tuple[int, np.ndarray, np.ndarray]] = []
    for block, part_cells, part_values in parts:
        if len(part_cells):
            listed.append((int(block), np.asarray(part_cells, dtype=np.int32),
                           narrow_counts(np.asarray(part_values, dtype=np.int64))))
    if len({block for block, _, _ in listed}) != len(listed):
        raise ValueError("a block of the span histograms was combined twice")
    listed.sort(key=lambda part: part[0])
    cell_parts = [part[1].astype(np.int64) + part[0] * span for part in listed]
    value_parts = [part[2] for part in listed]
    del listed
    cells = np.concatenate([np.zeros(0, dtype=np.int64), *cell_parts])
    del cell_parts
    values = np.concatenate([np.zeros(0, dtype=np.int64), *value_parts])  # int64: no copy
    del value_parts
    return SparseCounts.from_cells(cells, values, n_rows, width)


# ------------------------------------------------------------------ the stages
def beam_span_corpus(texts: Iterable[str], settings: SpanSettings, releases: LedgerReleases,
                     *, stop: Collection[str], scratch: Path, runner: str = "direct",
                     beam_options: Sequence[str] = (), workers: int | None = None,
                     batch_size: int | None = None, embed: Embed | None = None,
                     progress: Callable[[int], None] | None = None) -> SpanCorpus:
    """``span_corpus(texts, settings, releases, stop=stop, embed=embed)`` with the
    per-document work and the counts on Beam (module docstring). ``scratch``: a private
    folder of the state directory (created 0700, replaced, removed at the end);
    ``batch_size`` documents per batch (default ``BATCH_DOCUMENTS``)."""
    lengths = _check_lengths(settings.lengths)
    caps = level_caps(settings.level_items, len(lengths))
    batch_size = BATCH_DOCUMENTS if batch_size is None else batch_size
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError("batch_size must be a positive integer")
    stop = frozenset(stop)
    if scratch.exists():  # a crashed build's private files: never reused
        shutil.rmtree(scratch)
    scratch.mkdir(mode=0o700, parents=True)
    os.chmod(scratch, 0o700)
    try:
        worker_log = scratch.parent / f"{SCRATCH}-workers.log"
        worker_log.unlink(missing_ok=True)
        os.close(os.open(worker_log, os.O_WRONLY | os.O_CREAT, 0o600))
        passes = _Passes(scratch, runner, beam_options, workers, worker_log)
        beam = passes.beam
        shards = max(1, 2 * (workers or os.cpu_count() or 1))
        _write_input(texts, scratch / "input", batch_size, shards)

        # (n1) the levels: the first pass tokenizes (and keeps the tokens), each counts
        released: dict[int, dict[str, int]] = {}
        previous: dict[str, int] | None = None
        previous_length: int | None = None
        for index, (length, cap, key) in enumerate(zip(lengths, caps, level_keys(lengths),
                                                       strict=True)):
            count = functools.partial(level_batch_counts, length=length, previous=previous,
                                      previous_length=previous_length, cap=cap,
                                      weight_scale=releases.weight_scale, stop=stop)
            name = f"counts-{index:02d}"

            def level_pass(pipeline: Any, first: bool = index == 0,
                           count: Callable[..., Any] = count, name: str = name) -> None:
                if first:
                    batches = (pipeline
                               | "read texts" >> beam.io.ReadFromText(passes.pattern("input"))
                               | "tokenize" >> beam.Map(_guarded("tokenize", tokenize_batch)))
                    _ = (batches | "tokens as json" >> beam.Map(_dump_tokens)
                         | "keep tokens" >> beam.io.WriteToText(passes.prefix("tokens")))
                else:
                    batches = (pipeline
                               | "read tokens" >> beam.io.ReadFromText(passes.pattern("tokens"))
                               | "tokens" >> beam.Map(_load_tokens))
                _ = (batches
                     | "choices and counts" >> beam.FlatMap(_guarded("n-gram level", count))
                     | "combine counts" >> beam.CombinePerKey(sum)
                     | "counts as json" >> beam.Map(_dump_pair)
                     | "write counts" >> beam.io.WriteToText(passes.prefix(name)))

            passes.run(f"n-gram level {length}", level_pass)
            counts = dict(passes.read_pairs(name))
            level = merge_pass(released.get(length), _release_level(releases, key, counts, cap))
            del counts
            released[length] = level
            previous, previous_length = level, length
            if progress is not None:
                progress(1)

        # (n2) public values from the releases
        merged: dict[str, int] = {}
        for length in lengths:
            merged.update(released.get(length, {}))
        domain = span_domain(merged, stop)
        anchor_counts = anchors_of(domain, merged)
        priority = anchor_priority(anchor_counts, stop)
        ranks = AnchorRanks.of(anchor_counts, priority=priority)  # anchor_clusters' order
        anchors = list(ranks.order)
        if not anchors:
            return SpanCorpus([], 0)

        # (n3) the span histograms: the group declared (and its L read back) as
        # release_span_histograms does, before any count
        k, L = int(settings.cluster_cap), int(settings.L)
        if k < 1 or L < 1:
            raise ValueError("cluster_cap and L must be positive integers")
        sigma = releases.sigma_clusters
        if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
            raise ValueError("sigma must be a finite positive number")
        releases.ledger.declare_parallel_group(GROUP, L, GROUP_DESCRIPTION)
        overlap = declared_overlap(releases.ledger, GROUP)
        width = len(domain)
        block_span(width)  # a public size: refused here, before the pass
        cells = functools.partial(
            fact_batch_cells, released_levels=released,
            domain_index={g: j for j, g in enumerate(domain)}, released=merged,
            ranks=ranks, cap=k, L=L,
            max_overlap=overlap, width=width, stop=stop,
            weight_scale=releases.span_weight_scale)

        def fact_pass(pipeline: Any) -> None:
            _ = (pipeline
                 | "read tokens" >> beam.io.ReadFromText(passes.pattern("tokens"))
                 | "tokens" >> beam.Map(_load_tokens)
                 | "items, clusters, cells" >> beam.FlatMap(_guarded("span histograms", cells))
                 | "combine cells" >> beam.CombinePerKey(merge_cell_parts)
                 | "cells as json" >> beam.Map(_dump_cell_part)
                 | "write cells" >> beam.io.WriteToText(passes.prefix("cells")))

        passes.run("span histograms", fact_pass)
        table = _read_cells(passes.read_lines("cells"), len(anchors), width)
        kept = _release_histograms(releases, table, domain, k, progress)
        del table
        notes = span_notes(kept, domain, anchors, releases.sigma_clusters, stopwords=stop,
                           released=released)
        if embed is not None:  # (n5), as span_corpus: post-processing in the driver
            notes = [*notes, *leftover_notes(notes, anchor_counts, embed, stop,
                                              released=released)]
        return SpanCorpus(notes, len(anchors))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
