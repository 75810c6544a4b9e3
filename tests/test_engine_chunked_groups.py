"""A group larger than the engine's rows runs in shards, in memory bounded by public values.

The packed engine keeps at most ``batch_rows`` rows in flight whatever a group's size: a group
of more than ``shard_rows`` (<= ``batch_rows``) rows runs alone in shards, each shard's float64
votes are added, and the sampler is called once per step for the group
(``decoding_packed``). Every row is computed with the shapes and inputs it has in a group
in one piece, so:

* with the same ``batch_rows`` (the same kernel shapes), a sharded group's votes equal those
  of the group in one piece up to the order of the float64 additions of its rows: each
  addition rounds by at most 2^-53 of the running sum, so n rows in [-c, c] move by at most
  ~n^2 c 2^-53 (~2e-14 c for n = 13); ``SAME_SHAPES_ATOL`` allows 1e-12 c. Measured
  here: 0 (float32 rows of a similar magnitude add exactly in float64), for every family
  tried, the public-difference path and stand-in graphs. A wrong, missing or doubled row
  moves a vote by the order of the clip bound;
* with a smaller ``batch_rows`` (3 x batch_rows + 1 rows in shards against batch_rows >= the
  group) the chunk shapes differ, so the rows' float32 rounding may differ as any change of
  ``batch_rows`` does (``ATOL``, as the engine-against-reference tests allow; measured: 0 on
  this CPU);
* one-hot votes (integers) are equal bit for bit whatever the order;
* whether a shard's KV was kept in the cache or recomputed by KV-only steps changes nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from fixed_draws import FixedDraws
from test_private_prediction import CLIP, PROMPT, WORDS, tiny_llm
from test_step_graphs import FakeCapturer
from tiny_models import make_tiny_family_llm

from dpsynrag.accounting.rng import secure_rng
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.transforms import private_prediction as pp
from dpsynrag.transforms.decoding_packed import PackedEngine, StepReport
from dpsynrag.transforms.packed_step import StepKey, bucket, step_index
from dpsynrag.transforms.private_prediction import aggregated_logits
from dpsynrag.transforms.public_prior import PublicPriorSettings
from dpsynrag.transforms.step_graphs import StepGraphs

TAU = 0.3  # sharp enough that a wrong vote changes the drawn tokens
STEPS = 5
SAME_SHAPES_ATOL = 1e-12 * CLIP  # float64 reordering only: > 50 x n^2 c 2^-53 for n <= 13
ATOL = 5e-5  # other batch_rows: float32 rounding of other kernel shapes (test_decoder_families)
FAMILIES = ("llama", "gemma2")  # plain, and sandwich norms, soft-capping, windows
PUBLIC = PublicPriorSettings(documents="known facts : fever cough", top_k=6, temperature=2.0,
                             candidates=("chest pain",))


def _llm(kind: str) -> LoadedLLM:
    return tiny_llm() if kind == "llama" else make_tiny_family_llm(kind, WORDS)


def _groups(big: int, seed: int = 23) -> list[list[str]]:
    """Small groups around group 1 of ``big`` rows (documents of 1 to 70 words: two lane
    widths; one document twice in the big group, one shared with a small group)."""
    rs = np.random.default_rng(seed)
    docs = [" ".join(rs.choice(WORDS[:-8], int(n))) for n in rs.integers(1, 70, size=big + 6)]
    large = [*docs[:big - 1], docs[0]]
    return [docs[big:big + 3], large, [], [docs[big + 3], docs[1]], docs[big + 4:big + 6]]


def Draws() -> FixedDraws:
    return FixedDraws(tau=TAU)


class NoEnd(FixedDraws):
    """FixedDraws that never draws an end of sequence (every group runs all its steps, so a
    large group's shards or streamed rows are fed the most tokens): the EOS coordinates of
    the votes are set to -inf before the draw (and in the recorded votes)."""

    def __init__(self, eos: frozenset[int], released: list[list[int]] | None = None) -> None:
        super().__init__(released, tau=TAU)
        self.eos = sorted(eos)

    def __call__(self, votes: torch.Tensor, active: list[int]) -> np.ndarray:
        votes = votes.clone()
        votes[:, self.eos] = float("-inf")
        return super().__call__(votes, active)


def _run(llm: LoadedLLM, groups: list[list[str]], *, batch_rows: int,
         shard_rows: int | None = None, cache_bytes: int | None = None,
         graphs: bool = False, prior: bool = False,
         transform: Any = None,
         no_end: bool = False) -> tuple[Draws, PackedEngine, list[StepReport]]:
    """A packed engine run as ``private_predict`` builds it, with the engine's shard rows,
    document-cache bound and stand-in graphs (captured on a key's first step) set here."""
    draws = NoEnd(frozenset(llm.eos_token_ids)) if no_end else Draws()
    made: list[PackedEngine] = []
    reports: list[StepReport] = []
    real = pp.PackedEngine

    def build(*args: Any, **kwargs: Any) -> PackedEngine:
        kwargs["shard_rows"] = shard_rows
        if cache_bytes is not None:  # else private_predict's (the engine's own on CPU)
            kwargs["doc_cache_bytes"] = cache_bytes
        engine = real(*args, **kwargs)
        if graphs:
            engine.graphs = StepGraphs(FakeCapturer(), capture_after=1)
        made.append(engine)
        return engine

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pp, "PackedEngine", build)
        pp.private_predict(llm, groups, prompt=PROMPT, max_new_tokens=STEPS, clip=CLIP,
                           temperature=TAU, rng=secure_rng(0), batch_rows=batch_rows,
                           sampler=draws, engine="packed", on_step=reports.append,
                           public_prior=PUBLIC if prior else None, row_transform=transform)
    return draws, made[0], reports


def _gap(a: Draws, b: Draws) -> float:
    """Equal tokens and steps (the same draws); the largest gap between their votes (the
    same coordinates finite: -inf off a public support)."""
    assert a.tokens == b.tokens and a.votes.keys() == b.votes.keys()
    worst = 0.0
    for key, votes in a.votes.items():
        other = b.votes[key]
        finite = torch.isfinite(votes)
        assert torch.equal(finite, torch.isfinite(other))
        if finite.any():
            worst = max(worst, float((votes[finite] - other[finite]).abs().max()))
    return worst


def _check_bounds(engine: PackedEngine, reports: list[StepReport]) -> None:
    """Rows in flight, lane slots and the cache stay within public bounds."""
    rows = engine.batch_rows
    assert engine.max_rows == engine.row_budget == rows
    assert 0 < engine.peak_rows <= rows
    assert all(r.active_rows <= rows for r in reports)
    per_lane = bucket(-(-rows // engine.attn_rows)) * engine.attn_rows
    assert all(lane.capacity <= per_lane for lane in engine.lanes.values())
    assert engine.slot_capacity <= per_lane * len(engine.lanes)
    # the bound, or one document's KV above it (a prefilled document is copied at once)
    document = engine.kv_token_bytes * max(engine.lanes)
    assert engine.cache.peak_bytes <= max(engine.cache.max_bytes, document)


@pytest.mark.parametrize("kind", FAMILIES)
def test_a_group_of_3_batches_plus_one_votes_as_with_batch_rows_above_it(kind: str) -> None:
    """13 rows with batch_rows 4 (shards of 4, 4, 4, 1) against batch_rows 16 (one piece):
    the same tokens and the votes within the float32 rounding of another chunk shape; the
    large group's votes equal the row-by-row audit reference (every shard summed, once)."""
    llm = _llm(kind)
    groups = _groups(13)
    whole, engine16, _ = _run(llm, groups, batch_rows=16)
    sharded, engine4, reports = _run(llm, groups, batch_rows=4)
    assert engine16.peak_rows >= 13 and engine16.replayed_row_steps == 0
    assert _gap(whole, sharded) < ATOL
    _check_bounds(engine4, reports)
    for step in range(len(sharded.tokens[1])):
        expected = aggregated_logits(llm, groups[1], prompt=PROMPT,
                                     generated=sharded.tokens[1][:step], clip=CLIP)
        torch.testing.assert_close(sharded.votes[(1, step)], expected, rtol=0, atol=ATOL)
    # the large group ran alone, sampled once per step with its summed shards
    alone = [call for call in sharded.calls if 1 in call]
    assert alone == [[1]] * len(sharded.tokens[1])


@pytest.mark.parametrize("kind", FAMILIES)
@pytest.mark.parametrize("cache", ["kept", "recomputed"])
def test_shards_change_only_the_order_of_the_float64_sum(kind: str, cache: str) -> None:
    """batch_rows 16 for both runs (the same kernel shapes): the 13-row group in one piece, or
    in shards of 4 whose KV the cache keeps (no KV-only steps) or evicts (each shard that
    comes back is prefilled and fed again)."""
    llm = _llm(kind)
    groups = _groups(13)
    whole, _, _ = _run(llm, groups, batch_rows=16)
    bound = 1 << 30 if cache == "kept" else 1
    sharded, engine, reports = _run(llm, groups, batch_rows=16, shard_rows=4,
                                    cache_bytes=bound)
    assert _gap(whole, sharded) <= SAME_SHAPES_ATOL
    assert engine.peak_rows <= 4 < len(groups[1])
    if cache == "kept":
        assert engine.replayed_row_steps == 0
    else:
        assert engine.replayed_row_steps > 0
        assert any(key.votes == 0 for key in engine.step_keys)  # KV-only steps ran
    _check_bounds(engine, reports)


@pytest.mark.parametrize("size", [4, 5, 13])
def test_rows_in_flight_never_exceed_batch_rows(size: int) -> None:
    """Whatever the largest group's size, at most batch_rows rows are in flight, each lane
    holds at most batch_rows' bucketed parts, and the default cache bound is a function of
    batch_rows (not of the largest group)."""
    llm = tiny_llm()
    groups = _groups(size, seed=size)
    draws, engine, reports = _run(llm, groups, batch_rows=4)
    _check_bounds(engine, reports)
    per_slot = engine.kv_token_bytes * max(engine.lanes)
    assert engine.cache.max_bytes <= 2 * per_slot * engine.batch_rows
    # every group sampled once per step, the large one alone when it is sharded
    assert sum(len(call) for call in draws.calls) == sum(map(len, draws.tokens.values()))
    if size > 4:
        assert [call for call in draws.calls if 1 in call] == [[1]] * len(draws.tokens[1])


@pytest.mark.parametrize("path", ["public-difference", "greedy-vote", "graphs"])
def test_sharded_votes_on_the_other_paths(path: str) -> None:
    """The public-difference rows, one-hot greedy votes (integers: equal bit for bit) and the
    stand-in CUDA graphs (KV-only keys captured too) agree with the group in one piece."""
    from test_batch_invariance import _one_hot

    llm = tiny_llm()
    groups = _groups(13)
    kwargs: dict[str, Any] = {"prior": path == "public-difference",
                              "transform": _one_hot if path == "greedy-vote" else None}
    whole, _, _ = _run(llm, groups, batch_rows=16, **kwargs)
    sharded, engine, _ = _run(llm, groups, batch_rows=16, shard_rows=4, cache_bytes=1,
                              graphs=path == "graphs", **kwargs)
    if path == "greedy-vote":
        assert whole.tokens == sharded.tokens
        for key, votes in whole.votes.items():
            assert torch.equal(sharded.votes[key], votes), key
    else:
        assert _gap(whole, sharded) <= SAME_SHAPES_ATOL
    if path == "graphs":
        graphs = engine.graphs
        assert graphs.active and graphs.eager_steps == 0 and graphs.replays > 0
        assert any(key.votes == 0 for key in engine.step_keys)


def test_step_index_of_a_kv_only_step() -> None:
    """votes_rows == active == 0: no votes buffer; every row's votes row reads 0."""
    from dpsynrag.transforms.packed_step import LaneRows

    lane = LaneRows(width=64, parts=2, group=np.array([3, -1, 3, 3]),
                    length=np.array([5, 0, 6, 7]), token=np.array([9, 0, 8, 7]))
    plan = step_index([lane], np.full(4, -1), 0, part_rows=2, batch_rows=4, votes_rows=0,
                      pin=False)
    assert plan.key == StepKey(lanes=((64, 2),), chunks=1, votes=0)
    tokens, lengths, owner = plan.index.tolist()
    assert tokens == [9, 0, 8, 7] and lengths == [5, 0, 6, 7] and owner == [0, 0, 0, 0]
    with pytest.raises(ValueError):  # a votes step still needs its dummy row
        step_index([lane], np.full(4, -1), 1, part_rows=2, batch_rows=4, votes_rows=1,
                   pin=False)


def test_shard_rows_must_lie_within_batch_rows() -> None:
    llm = tiny_llm()
    with pytest.raises(ValueError, match="shard_rows"):
        _run(llm, _groups(5), batch_rows=4, shard_rows=5)
    with pytest.raises(ValueError, match="shard_rows"):
        _run(llm, _groups(5), batch_rows=4, shard_rows=0)


def test_a_group_50_times_batch_rows_runs_within_the_memory_plan() -> None:
    """Issue 29: a cluster of 50 x batch_rows rows (batch_rows 4, the default cache bound of
    two batches' slots): rows in flight, lane slots and the cache stay within the public plan,
    the cache's bound is a function of batch_rows and not of the group, evicted shards are
    recomputed, and the tokens equal those of batch_rows above the group, sampled once per
    step (the reference engine's twin is in ``test_reference_engine_chunks``)."""
    rows = 4
    llm = tiny_llm()
    groups = _groups(50 * rows)
    whole, engine_whole, _ = _run(llm, groups, batch_rows=256, no_end=True)
    sharded, engine, reports = _run(llm, groups, batch_rows=rows, no_end=True)
    assert engine_whole.peak_rows >= len(groups[1]) == 50 * rows  # the control grows
    assert engine.peak_rows <= rows
    _check_bounds(engine, reports)
    per_slot = engine.kv_token_bytes * max(engine.lanes)
    assert engine.cache.max_bytes <= 2 * per_slot * rows
    assert engine.cache.max_bytes < engine_whole.cache.max_bytes
    assert engine.replayed_row_steps > 0  # 50 shards do not fit the cache: recomputed
    assert _gap(whole, sharded) < ATOL
    assert all(len(tokens) == STEPS for tokens in sharded.tokens.values())
    assert [call for call in sharded.calls if 1 in call] == [[1]] * len(sharded.tokens[1])
