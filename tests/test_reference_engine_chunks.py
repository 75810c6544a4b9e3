"""The reference engine holds at most ``batch_rows`` rows' KV caches, whatever a group's size.

A group of more than ``batch_rows`` rows keeps the caches of its first ``batch_rows - 1``
rows and streams the others through each step: each is rebuilt by the calls a kept row went
through (prefill of the prompt and released tokens, one feed per generated token), clipped,
added and dropped (``decoding_reference``). A streamed row is the same float32 vector as a
kept one and rows are added in the same order, so the votes equal those of the group with
every cache kept bit for bit, and so do the tokens drawn from them.

The bounds are measured from outside the engine too: every cache the engine's prefill makes
is tracked by a weak reference, so a cache the engine still holds (or leaks) is counted
until it is really freed; the unbounded run (``batch_rows`` above the group) is the control
whose count grows with the group.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import pytest
import torch
from fixed_draws import FixedDraws
from test_engine_chunked_groups import NoEnd, _groups
from test_private_prediction import CLIP, PROMPT, tiny_llm

from dpsynrag.accounting.clipping import clip_logits
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.transforms import decoding_reference
from dpsynrag.transforms import private_prediction as pp
from dpsynrag.transforms.public_prior import PublicPriorSettings

TAU = 0.3
PUBLIC = PublicPriorSettings(documents="known facts : fever cough", top_k=6, temperature=2.0,
                             candidates=("chest pain",))


@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return tiny_llm()


class CacheWatch:
    """Counts the KV caches alive after every prefill and feed of the engine, and their bytes
    (weak references: a cache counts until it is freed)."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        self.live: weakref.WeakSet[Any] = weakref.WeakSet()
        self.sizes: dict[int, int] = {}
        self.bytes = self.peak_rows = self.peak_bytes = 0
        real_prefill, real_feed = decoding_reference._prefill, decoding_reference._feed

        def prefill(model: Any, rows: Any, device: Any) -> Any:
            assert len(rows) == 1  # each row alone, as before
            out = real_prefill(model, rows, device)
            cache = out[1]["cache"]
            self.live.add(cache)
            self.sizes[id(cache)] = 0
            weakref.finalize(cache, self._freed, id(cache))
            self._measure(cache)
            return out

        def feed(model: Any, state: Any, token: int) -> Any:
            out = real_feed(model, state, token)
            self._measure(out[1]["cache"])
            return out

        patch.setattr(decoding_reference, "_prefill", prefill)
        patch.setattr(decoding_reference, "_feed", feed)

    def _freed(self, key: int) -> None:
        self.bytes -= self.sizes.pop(key)

    def _measure(self, cache: Any) -> None:
        """The one cache a call grew is measured again; the others did not change."""
        size = cache_bytes(cache)
        self.bytes += size - self.sizes[id(cache)]
        self.sizes[id(cache)] = size
        self.peak_rows = max(self.peak_rows, len(self.live))
        self.peak_bytes = max(self.peak_bytes, self.bytes)


def cache_bytes(cache: Any) -> int:
    return sum(t.nbytes for layer in cache.layers for t in (layer.keys, layer.values)
               if isinstance(t, torch.Tensor))


def _run(llm: LoadedLLM, groups: list[list[str]], *, batch_rows: int, steps: int,
         released: list[list[int]] | None = None, prior: bool = False,
         transform: Any = None) -> tuple[NoEnd, dict[str, float], CacheWatch, list[str]]:
    """``private_predict`` on the reference engine; its draws, the engine's counters, the
    caches measured from outside and the texts."""
    draws = NoEnd(frozenset(llm.eos_token_ids), released)
    timings: dict[str, float] = {}
    real = pp.reference_tokens

    def reference(*args: Any, **kwargs: Any) -> Any:
        assert kwargs["batch_rows"] == batch_rows  # private_predict passes its bound on
        return real(*args, **kwargs, timings=timings)

    with pytest.MonkeyPatch.context() as patch:
        watch = CacheWatch(patch)
        patch.setattr(pp, "reference_tokens", reference)
        texts = pp.private_predict(
            llm, groups, prompt=PROMPT, max_new_tokens=steps, clip=CLIP, temperature=TAU,
            rng=secure_rng(0), batch_rows=batch_rows, sampler=draws, engine="reference",
            released=released, public_prior=PUBLIC if prior else None, row_transform=transform)
    return draws, timings, watch, texts


def _same_votes(a: FixedDraws, b: FixedDraws) -> None:
    """The same tokens, calls and votes, bit for bit."""
    assert a.tokens == b.tokens and a.calls == b.calls
    assert a.votes.keys() == b.votes.keys()
    for key, votes in a.votes.items():
        assert torch.equal(votes, b.votes[key]), key


def _row_lengths(llm: LoadedLLM, docs: list[str]) -> list[int]:
    layout = pp.prompt_layout(llm, PROMPT)
    return [len(pp.document_row_ids(llm, layout, d)) for d in docs]


def test_a_group_50_times_batch_rows_runs_within_the_memory_plan(llm: LoadedLLM) -> None:
    """100 rows with batch_rows 2: at most 2 caches alive at any time (engine counter and
    weak references), their bytes within 2 rows at full length, the group sampled once per
    step, and the votes and tokens of the run whose batch_rows holds the whole group."""
    rows, steps = 2, 4
    groups = _groups(50 * rows)
    big = len(groups[1])
    tick = time.perf_counter()
    whole, whole_counts, whole_watch, whole_texts = _run(llm, groups, batch_rows=256,
                                                         steps=steps)
    whole_s = time.perf_counter() - tick
    tick = time.perf_counter()
    streamed, counts, watch, texts = _run(llm, groups, batch_rows=rows, steps=steps)
    streamed_s = time.perf_counter() - tick
    _same_votes(whole, streamed)
    assert texts == whole_texts
    assert [len(t) for t in streamed.tokens.values()] == [steps] * len(groups)
    assert streamed.calls == [[g] for g in range(len(groups)) for _ in range(steps)]
    # the control: every cache kept, so the count grows with the group
    assert whole_counts["peak_rows"] == whole_watch.peak_rows == big
    assert whole_counts["replayed_row_steps"] == 0
    # the bound: the engine's counter, and the caches really alive
    assert counts["peak_rows"] == watch.peak_rows == rows
    config = llm.model.config
    token_bytes = (2 * config.num_hidden_layers * config.num_key_value_heads
                   * (config.hidden_size // config.num_attention_heads) * 4)
    longest = max(_row_lengths(llm, [d for g in groups for d in g])) + steps
    plan = rows * longest * token_bytes
    assert 0 < watch.peak_bytes <= plan < whole_watch.peak_bytes
    # the cost: each streamed row (beyond the first rows - 1 of a group above rows) rebuilt
    # by k calls at step k (a prefill and k - 1 feeds)
    streamed_rows = sum(len(g) - (rows - 1) for g in groups if len(g) > rows)
    assert streamed_rows > big - rows
    assert counts["replayed_row_steps"] == streamed_rows * sum(range(steps))
    assert counts["row_steps"] == whole_counts["row_steps"]
    print(f"\n50x group: {streamed_s:.2f} s streamed, {whole_s:.2f} s every cache kept")


@pytest.mark.parametrize("path", ["clip", "public-difference", "greedy-vote"])
@pytest.mark.parametrize("rows", [1, 4])
def test_streamed_rows_vote_as_kept_rows_on_every_path(llm: LoadedLLM, path: str,
                                                       rows: int) -> None:
    """13 rows with batch_rows 1 (every row streamed) or 4: the clipped, public-difference
    and one-hot rows equal those of the group with every cache kept, bit for bit."""
    from test_batch_invariance import _one_hot

    groups = _groups(13)
    kwargs: dict[str, Any] = {"prior": path == "public-difference",
                              "transform": _one_hot if path == "greedy-vote" else None}
    whole, _, _, _ = _run(llm, groups, batch_rows=16, steps=4, **kwargs)
    streamed, counts, watch, _ = _run(llm, groups, batch_rows=rows, steps=4, **kwargs)
    _same_votes(whole, streamed)
    assert counts["peak_rows"] == watch.peak_rows == rows
    assert counts["replayed_row_steps"] > 0


def test_a_group_within_batch_rows_keeps_every_cache(llm: LoadedLLM) -> None:
    """A group of exactly batch_rows rows is never streamed (nothing replayed)."""
    groups = _groups(4)
    _, counts, watch, _ = _run(llm, groups, batch_rows=4, steps=3)
    assert counts["replayed_row_steps"] == 0
    assert counts["peak_rows"] == watch.peak_rows == 4


def test_a_resumed_group_streams_from_its_released_tokens(llm: LoadedLLM) -> None:
    """A resumed run (2 released tokens per group) with batch_rows 4: streamed rows are
    prefilled with the released tokens as kept ones are, so its votes equal the resumed run
    with every cache kept bit for bit, and its tokens the uninterrupted run's; the sampler is
    never asked for a released step."""
    groups = _groups(13)
    full, _, _, full_texts = _run(llm, groups, batch_rows=16, steps=5)
    released = [full.tokens[g][:2] for g in range(len(groups))]
    whole, _, _, _ = _run(llm, groups, batch_rows=16, steps=5, released=released)
    streamed, counts, watch, texts = _run(llm, groups, batch_rows=4, steps=5,
                                          released=released)
    _same_votes(whole, streamed)
    assert streamed.tokens == full.tokens and texts == full_texts
    assert all(step >= 2 for _, step in streamed.votes)
    assert counts["peak_rows"] == watch.peak_rows == 4
    # three steps after the released two: k = 0, 1, 2 tokens fed to each streamed row
    assert counts["replayed_row_steps"] == (len(groups[1]) - 3) * (0 + 1 + 2)


def test_batch_rows_must_be_positive(llm: LoadedLLM) -> None:
    rows = [[(1, 2, 3)]]
    with pytest.raises(ValueError, match="batch_rows"):
        decoding_reference.reference_tokens(
            llm.model, rows, max_new_tokens=2, clip=CLIP, sampler=FixedDraws(),
            eos_ids=frozenset(), vocab_size=llm.vocab_size, device=torch.device("cpu"),
            batch_rows=0)


def test_no_row_logits_outlive_their_addition(llm: LoadedLLM) -> None:
    """Each row's logits are clipped and added before the next row runs: when a row's
    transform is called, no earlier row's logits are alive, so the engine holds no
    vocabulary-sized vector per row (it used to hold every row's logits of a step)."""
    alive: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()
    most = [0]

    def transform(logits: torch.Tensor) -> torch.Tensor:
        most[0] = max(most[0], len(alive))
        alive.add(logits)
        return clip_logits(logits, CLIP)

    for rows in (16, 4):
        most[0] = 0
        _run(llm, _groups(13), batch_rows=rows, steps=2, transform=transform)
        assert most[0] == 0, rows
