"""The packed engine's decode step (``packed_step``): bucket sizes, the step's key and index,
and votes that buckets and (stand-in) CUDA graphs leave bit for bit unchanged, on the
workloads of the engine-vs-reference tests: mixed and staggered groups, the public-prior
path, a row transform, and every decoder family."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from test_batch_invariance import _one_hot
from test_decoder_families import _groups as family_groups
from test_private_prediction import CLIP, PROMPT, WORDS, Scripted, _doc, _groups, tiny_llm
from test_step_graphs import FakeCapturer
from tiny_models import FAMILY_KINDS, make_tiny_family_llm

from dpsynrag.accounting.rng import secure_rng
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.transforms import decoding_stack
from dpsynrag.transforms import private_prediction as pp
from dpsynrag.transforms.decoding_packed import PackedEngine
from dpsynrag.transforms.packed_step import LaneRows, StepKey, bucket, step_index, unbucketed
from dpsynrag.transforms.public_prior import PublicPriorSettings
from dpsynrag.transforms.step_graphs import StepGraphs

PUBLIC = PublicPriorSettings(documents="known facts : fever cough", top_k=6, temperature=2.0,
                             candidates=("chest pain",))


@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return tiny_llm()


def test_bucket_sizes_are_powers_of_two_and_their_halves_between() -> None:
    assert [bucket(n) for n in range(14)] == [0, 1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 12, 12, 16]
    for n in range(1, 3000):
        size = bucket(n)
        assert n <= size < 1.5 * n or size == 2 * n == 2
        assert bucket(size) == size
    assert len({bucket(n) for n in range(1, 1025)}) == 20
    assert [unbucketed(n) for n in (0, 5, 7)] == [0, 5, 7]


def test_step_index_routes_holes_and_filler_to_the_dummy_row() -> None:
    wide = LaneRows(width=128, parts=2, group=np.array([4, -1, 2, -1, -1, -1]),
                    length=np.array([7, 3, 9, 0, 0, 0]), token=np.array([11, 12, 13, 0, 0, 0]))
    narrow = LaneRows(width=64, parts=1, group=np.array([2, 2]), length=np.array([1, 2]),
                      token=np.array([21, 22]))
    positions = np.array([-1, -1, 1, -1, 0])  # group 4 first among the active, then group 2
    plan = step_index([narrow, wide], positions, 2, part_rows=2, batch_rows=4, votes_rows=3,
                      pin=False)
    assert plan.key == StepKey(lanes=((64, 1), (128, 2)), chunks=2, votes=3)
    assert plan.occupied == 4
    tokens, lengths, owner = plan.index.tolist()
    assert tokens == [21, 22, 11, 0, 13, 0, 0, 0]
    assert lengths == [1, 2, 7, 0, 9, 0, 0, 0]
    assert owner == [1, 1, 0, 2, 1, 2, 2, 2]  # the hole, its neighbour and the filler: dummy
    with pytest.raises(ValueError):  # no room for the dummy row
        step_index([narrow], positions, 2, part_rows=2, batch_rows=4, votes_rows=2, pin=False)


def _engine(llm: LoadedLLM, groups: list[list[str]], *, batch_rows: int | None, steps: int,
            stops: dict[int, int], sizes: str = "bucket", graphs: str = "eager",
            prior: bool = False, transform: bool = False) -> tuple[Scripted, PackedEngine]:
    """A packed engine run, as ``private_predict`` builds it, with buckets on or off and
    eager steps or stand-in graphs (captured on the first occurrence of a key)."""
    script = Scripted(llm.vocab_size, next(iter(llm.eos_token_ids)), stops)
    made: list[PackedEngine] = []
    real = pp.PackedEngine

    def build(*args: Any, **kwargs: Any) -> PackedEngine:
        kwargs["bucket"] = bucket if sizes == "bucket" else unbucketed
        engine = real(*args, **kwargs)
        if graphs == "fake":
            engine.graphs = StepGraphs(FakeCapturer(), capture_after=1)
        made.append(engine)
        return engine

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pp, "PackedEngine", build)
        pp.private_predict(llm, groups, prompt=PROMPT, max_new_tokens=steps, clip=CLIP,
                           temperature=0.7, rng=secure_rng(0), batch_rows=batch_rows,
                           sampler=script, engine="packed",
                           public_prior=PUBLIC if prior else None,
                           row_transform=_one_hot if transform else None)
    return script, made[0]


def _staggered() -> list[list[str]]:
    rs = np.random.default_rng(3)
    docs = [_doc(rs, int(n)) for n in rs.integers(1, 25, size=20)]
    return [[docs[(3 * g + j) % 20] for j in range(int(rs.integers(0, 6)))] for g in range(24)]


def _assert_same_votes(a: Scripted, b: Scripted) -> None:
    assert a.tokens == b.tokens and a.votes.keys() == b.votes.keys()
    for key, votes in a.votes.items():
        assert torch.equal(b.votes[key], votes), key


WORKLOADS: dict[str, dict[str, Any]] = {
    "mixed-8": dict(batch_rows=8, steps=5, stops={0: 1, 3: 3, 4: 0}),
    "mixed-default": dict(batch_rows=None, steps=5, stops={0: 1, 3: 3, 4: 0}),
    "staggered-16": dict(batch_rows=16, steps=7, stops={g: g % 7 for g in range(0, 24, 2)}),
    "prior-8": dict(batch_rows=8, steps=4, stops={0: 1, 3: 3, 4: 0}, prior=True),
    "greedy-vote-8": dict(batch_rows=8, steps=4, stops={0: 2}, transform=True),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_buckets_and_graphs_leave_every_vote_bit_identical(llm: LoadedLLM, name: str) -> None:
    spec = WORKLOADS[name]
    groups = _staggered() if name.startswith("staggered") else _groups("mixed")
    plain, plain_engine = _engine(llm, groups, sizes="none", **spec)
    bucketed, engine = _engine(llm, groups, **spec)
    graphed, graph_engine = _engine(llm, groups, graphs="fake", **spec)
    _assert_same_votes(plain, bucketed)
    _assert_same_votes(plain, graphed)
    # the buckets did round: every bucketed part count is a bucket size
    for key in engine.step_keys:
        assert all(bucket(parts) == parts for _, parts in key.lanes)
        assert key.votes - 1 == bucket(key.votes - 1)
    assert len(engine.step_keys) <= len(plain_engine.step_keys)
    if name == "staggered-16":  # some lane's part count was rounded up (filler parts ran)
        assert any(bucket(p) != p for key in plain_engine.step_keys for _, p in key.lanes)
        assert len(engine.step_keys) < len(plain_engine.step_keys)
    # the graph path captured each key on sight and replayed every step
    graphs = graph_engine.graphs
    assert graphs.active and graphs.eager_steps == 0
    assert graphs.captures >= len(graph_engine.step_keys) and graphs.replays >= graphs.captures
    assert graph_engine.step_keys == engine.step_keys


def test_a_lane_that_grows_after_a_capture_is_captured_again(llm: LoadedLLM) -> None:
    """Group 0 (2 rows) runs alone for 3 steps: its key is captured on a 2-slot lane. Group 1
    (8 rows, the row budget) then grows the lane to 8 slots, a new buffer, and stops at once;
    group 2 (2 rows) has group 0's key again: the stale graph must not be replayed."""
    rs = np.random.default_rng(11)
    docs = [_doc(rs, int(n)) for n in rs.integers(1, 12, size=12)]
    groups = [docs[0:2], docs[2:10], docs[10:12]]
    stops = {0: 2, 1: 0}
    eager, _ = _engine(llm, groups, batch_rows=8, steps=4, stops=stops)
    graphed, engine = _engine(llm, groups, batch_rows=8, steps=4, stops=stops, graphs="fake")
    _assert_same_votes(eager, graphed)
    graphs = engine.graphs
    assert engine.lanes[64].generation > 2  # grew after the first capture
    assert graphs.invalidations == 1 and graphs.captures == 3
    assert graphs.replays == len(eager.votes)  # one group per step, every step replayed


def test_step_keys_repeat_and_the_last_is_exposed(llm: LoadedLLM) -> None:
    groups = _groups("uniform")
    script, engine = _engine(llm, groups, batch_rows=8, steps=5, stops={})
    steps = len({step for _, step in script.votes})
    assert len(engine.step_keys) < steps  # uniform groups: the same shapes every step
    key = engine.step_key()
    assert key in engine.step_keys and key is not None
    assert key.chunks == -(-sum(p * engine.attn_rows for _, p in key.lanes) // 8)


@pytest.mark.parametrize("kind", FAMILY_KINDS)
def test_each_family_votes_are_unchanged_by_buckets_and_graphs(kind: str) -> None:
    llm = make_tiny_family_llm(kind, WORDS)
    groups = family_groups()
    runs = [_engine(llm, groups, batch_rows=8, steps=3, stops={1: 1}, sizes=sizes,
                    graphs=graphs)[0]
            for sizes, graphs in (("none", "eager"), ("bucket", "eager"), ("bucket", "fake"))]
    _assert_same_votes(runs[0], runs[1])
    _assert_same_votes(runs[0], runs[2])


@pytest.mark.parametrize("prior", [False, True], ids=["clipped", "public-difference"])
def test_a_document_row_with_non_finite_logits_votes_zero(llm: LoadedLLM,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          prior: bool) -> None:
    """A NaN in one document row's logits no longer stops the build after its charge: that
    row votes zero (clip_rows / difference_rows), every vote stays finite and in the bound,
    and the tokens are drawn."""
    real = decoding_stack.DecoderStack.logits

    def poisoned(self: decoding_stack.DecoderStack, hidden: torch.Tensor) -> torch.Tensor:
        out = real(self, hidden)
        out[1, :] = float("nan")
        return out

    monkeypatch.setattr(decoding_stack.DecoderStack, "logits", poisoned)
    calls: list[int] = []

    def sampler(votes: torch.Tensor, active: list[int]) -> np.ndarray:
        calls.append(len(active))
        assert not torch.isnan(votes).any()  # the poisoned row added a zero vote, not NaN
        return np.zeros(len(active), dtype=np.int64)

    pp.private_predict(llm, _groups("mixed"), prompt=PROMPT, max_new_tokens=2, clip=CLIP,
                       temperature=1.0, rng=secure_rng(0), batch_rows=8, sampler=sampler,
                       engine="packed", public_prior=PUBLIC if prior else None)
    assert calls


def test_bad_clip_is_refused_when_the_engine_clips(llm: LoadedLLM) -> None:
    layout = pp.prompt_layout(llm, PROMPT)
    prefix = pp.public_prefix_length([layout])
    rows = [[pp.document_row_ids(llm, layout, "fever cough")]]
    stack = decoding_stack.DecoderStack(llm.model)
    common: dict[str, Any] = dict(
        prefix_len=prefix, prefix_ids=list(layout.prefix[:prefix]), max_new_tokens=1,
        sampler=Scripted(llm.vocab_size, 0, {}), eos_ids=llm.eos_token_ids, batch_rows=8,
        vocab_size=llm.vocab_size)
    with pytest.raises(ValueError, match="clip bound"):
        PackedEngine(stack, rows, clip=0.0, **common)
    PackedEngine(stack, rows, clip=0.0, row_transform=_one_hot, **common)
