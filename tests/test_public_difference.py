"""Issue 15, levers 1-2: public-difference clipping on a public support.

Statistical tests use fixed seeds (deterministic outcome); for a correct sampler each
chi-square test's false-positive rate is alpha = 1e-3.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from test_private_prediction import PROMPT, SPECIALS, WORDS, Scripted, _groups
from tiny_models import make_tiny_llm

from dpsynrag.accounting.public_difference import difference_clip, prior_votes, public_support
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.accounting.token_sampling import sample_tokens
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.transforms.private_prediction import (
    aggregated_prior_votes,
    candidate_ids,
    private_predict,
)
from dpsynrag.transforms.public_prior import PublicPriorSettings, candidate_next

CLIP = 0.5
PUBLIC_DOC = "fever cough"


@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return make_tiny_llm(WORDS, specials=SPECIALS)


def _random_case(seed: int, rows: int = 6, vocab: int = 200, k: int = 20
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    scale = float(10 ** (seed % 4))  # logits from ~1 to ~1000 apart
    private = torch.randn((rows, vocab), generator=gen) * scale
    public = (torch.randn((1, vocab), generator=gen) * scale).expand(rows, vocab)
    support = public_support(public[:1], k, [{0, 3}]).expand(rows, vocab)
    return private, public, support


@pytest.mark.parametrize("seed", range(8))
def test_difference_rows_lie_in_minus_c_c_and_vanish_off_support(seed: int) -> None:
    private, public, support = _random_case(seed)
    for c in (0.01, 0.5, 3.0):
        rows = difference_clip(private, public, support, c)
        assert rows.dtype == torch.float32
        assert float(rows.abs().max()) <= c  # the sensitivity bound, after float rounding
        assert torch.count_nonzero(rows[~support]) == 0
        # the clamp is active: some coordinates sit at the bound on random logits
        assert float(rows.abs().max()) == torch.tensor(c, dtype=torch.float32).item()
        # neighbours: one document more moves every coordinate of the sum by at most c
        with_doc, without = rows.double().sum(0), rows[1:].double().sum(0)
        assert float((with_doc - without).abs().max()) <= c


def test_a_row_depends_on_its_own_logits_only_and_not_on_shifts() -> None:
    private, public, support = _random_case(1, vocab=100)
    rows = difference_clip(private, public, support, CLIP)
    changed = private.clone()
    changed[2:] = torch.randn_like(changed[2:]) * 50
    again = difference_clip(changed, public, support, CLIP)
    torch.testing.assert_close(again[:2], rows[:2], rtol=0, atol=0)
    shifted = difference_clip(private + 7.0, public - 3.0, support, CLIP)
    torch.testing.assert_close(shifted, rows, rtol=0, atol=1e-5)


def test_public_support_is_top_k_plus_extras_and_reads_public_values_only() -> None:
    public = torch.tensor([[5.0, 1.0, 5.0, 3.0, -2.0, 0.0],
                           [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    support = public_support(public, 2, [{4}, {5, 99}])
    # ties broken by the lower id: row 0 keeps 0 and 2; row 1 (all tied) keeps 0 and 1
    assert support.tolist() == [[True, False, True, False, True, False],
                                [True, True, False, False, False, True]]
    with pytest.raises(ValueError):
        public_support(public, 0, [set(), set()])
    with pytest.raises(ValueError):
        public_support(public, 2, [set()])


def test_prior_votes_sampler_follows_softmax_on_the_support() -> None:
    """Chi-square of 20,000 draws against softmax(z / tau) restricted to the public support;
    not one draw off the support."""
    private, public, support = _random_case(5, rows=12, vocab=300, k=15)
    tau = 0.4
    rows = difference_clip(private, public, support, CLIP).double().sum(0, keepdim=True)
    votes = prior_votes(rows, public[:1], support[:1], public_scale=tau / 2.0)
    draws = 20_000
    picks = sample_tokens(votes.expand(draws, -1), tau, secure_rng(11))
    assert support[0, torch.from_numpy(picks)].all()
    p = torch.softmax(votes[0] / tau, dim=0).numpy()
    assert abs(p[support[0].numpy()].sum() - 1.0) < 1e-12
    counts = np.bincount(picks, minlength=p.size).astype(float)
    keep = p * draws >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(p[keep] * draws, p[~keep].sum() * draws)
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1]
    assert keep.sum() >= 5
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-3


def test_sample_tokens_masks_minus_infinity_and_refuses_empty_rows() -> None:
    votes = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf"), 2.0, float("-inf")]],
                         dtype=torch.float64)
    picks = sample_tokens(votes.repeat(500, 1), 1.0, secure_rng(3))
    assert set(picks[1::2].tolist()) == {1} and 1 not in set(picks[0::2].tolist())
    with pytest.raises(ValueError, match="finite score"):
        sample_tokens(torch.full((1, 3), float("-inf"), dtype=torch.float64), 1.0, secure_rng(3))
    with pytest.raises(ValueError, match="NaN"):
        sample_tokens(torch.tensor([[0.0, float("nan")]], dtype=torch.float64), 1.0,
                      secure_rng(3))


def test_candidate_next_tokens_follow_the_generated_prefix() -> None:
    cands = [(10, 11, 12), (10, 20), (30,)]
    assert candidate_next([], cands) == {10, 30}
    assert candidate_next([5, 10], cands) == {10, 30, 11, 20}
    assert candidate_next([10, 11], cands) == {10, 30, 12}
    assert candidate_next([11], cands) == {10, 30}


def _settings(candidates: tuple[str, ...] = ("chest pain",), top_k: int = 6
              ) -> PublicPriorSettings:
    return PublicPriorSettings(documents=PUBLIC_DOC, top_k=top_k, temperature=2.0,
                               candidates=candidates)


@pytest.mark.parametrize("engine,batch_rows", [("packed", None), ("packed", 8),
                                               ("reference", None)])
def test_engine_votes_equal_the_row_by_row_reference(llm: LoadedLLM, engine: str,
                                                     batch_rows: int | None) -> None:
    groups = _groups("mixed")  # includes an empty group: the public prior alone
    eos = next(iter(llm.eos_token_ids))
    script = Scripted(llm.vocab_size, eos, {0: 1, 3: 3, 4: 0})
    tau = 0.7
    settings = _settings()
    private_predict(llm, groups, prompt=PROMPT, max_new_tokens=4, clip=CLIP, temperature=tau,
                    rng=secure_rng(0), batch_rows=batch_rows, sampler=script, engine=engine,
                    public_prior=settings)
    for (g, step), votes in script.votes.items():
        expected = aggregated_prior_votes(llm, groups[g], prompt=PROMPT,
                                          generated=script.tokens[g][:step], clip=CLIP,
                                          temperature=tau, public_prior=settings)
        assert torch.equal(torch.isinf(votes), torch.isinf(expected))
        finite = torch.isfinite(expected)
        torch.testing.assert_close(votes[finite], expected[finite], rtol=0, atol=2e-5)
        support = int(finite.sum())
        assert settings.top_k <= support <= settings.top_k + 1 + len(
            candidate_ids(llm, ["chest pain"]))


def test_the_support_never_reads_a_private_score(llm: LoadedLLM) -> None:
    """Two different private groups, the same scripted tokens: the same support each step."""
    eos = next(iter(llm.eos_token_ids))
    supports = []
    for docs in (["red green blue", "one two three"], ["fever cough head pain"] * 5):
        script = Scripted(llm.vocab_size, eos, {})
        private_predict(llm, [docs], prompt=PROMPT, max_new_tokens=3, clip=CLIP,
                        temperature=1.0, rng=secure_rng(0), sampler=script,
                        public_prior=_settings(top_k=4))
        supports.append([torch.isfinite(script.votes[(0, s)]) for s in range(3)])
    for a, b in zip(*supports, strict=True):
        assert torch.equal(a, b)


def test_first_token_through_the_engine_follows_the_prior_softmax(llm: LoadedLLM) -> None:
    """Chi-square of 2,000 first tokens (identical groups, packed engine) against
    softmax(z / tau) of the reference votes; alpha = 1e-3."""
    tau = 0.5
    draws = 2000
    docs = ["fever cough head pain", "patient doctor chest", "red green blue"]
    seen: list[int] = []
    rng = secure_rng(77)

    def recorder(votes: torch.Tensor, _active: list[int]) -> np.ndarray:
        picks = sample_tokens(votes, tau, rng)
        seen.extend(int(p) for p in picks)
        return picks

    settings = _settings(top_k=12)
    private_predict(llm, [docs] * draws, prompt=PROMPT, max_new_tokens=1, clip=CLIP,
                    temperature=tau, rng=rng, batch_rows=300, sampler=recorder,
                    public_prior=settings)
    z = aggregated_prior_votes(llm, docs, prompt=PROMPT, generated=[], clip=CLIP,
                               temperature=tau, public_prior=settings)
    p = torch.softmax(z / tau, dim=0).numpy()
    counts = np.bincount(seen, minlength=p.size).astype(float)
    assert counts[~np.isfinite(z.numpy())].sum() == 0
    keep = p * draws >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(p[keep] * draws, p[~keep].sum() * draws)
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1]
    assert keep.sum() >= 4
    assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-3


def test_a_prior_and_a_row_transform_are_refused_together(llm: LoadedLLM) -> None:
    with pytest.raises(ValueError, match="exclude each other"):
        private_predict(llm, [["fever"]], prompt=PROMPT, max_new_tokens=1, clip=CLIP,
                        temperature=1.0, rng=secure_rng(0), public_prior=_settings(),
                        row_transform=lambda rows: rows)
    with pytest.raises(ValueError, match="top-k"):
        private_predict(llm, [["fever"]], prompt=PROMPT, max_new_tokens=1, clip=CLIP,
                        temperature=1.0, rng=secure_rng(0), public_prior=_settings(top_k=0))


def test_a_document_that_agrees_with_the_public_model_leaves_the_prior_alone() -> None:
    """d = log-probabilities on the support, document minus public: 0 where they agree."""
    public = torch.tensor([[3.0, 1.0, 0.0, -1.0]])
    support = public_support(public, 3, [set()])
    agree = difference_clip(public + 5.0, public, support, CLIP)
    assert torch.count_nonzero(agree) == 0
    prefers_1 = difference_clip(torch.tensor([[3.0, 4.0, 0.0, -1.0]]), public, support, CLIP)
    assert prefers_1[0, 1] == CLIP and prefers_1[0, 0] < 0 and prefers_1[0, 3] == 0


def test_trie_completion_forces_the_only_continuation_of_a_begun_candidate() -> None:
    from dpsynrag.transforms.public_prior import candidate_forced

    cands = [(10, 11, 12, 13), (10, 11, 14), (20, 21, 22)]
    assert candidate_forced([20], cands) is None  # one token: not yet
    assert candidate_forced([5, 20, 21], cands) == 22
    assert candidate_forced([10, 11], cands) is None  # two candidates continue differently
    assert candidate_forced([10, 11, 12], cands) == 13
    assert candidate_forced([10, 11, 12, 13], cands) is None  # complete: free again
    assert candidate_forced([10, 11, 12], cands, complete_after=4) is None


def test_trie_completion_through_the_engine_draws_the_forced_token(llm: LoadedLLM) -> None:
    """Once a candidate's first two tokens are out, its third has probability 1; the draw is
    still a charged draw of the sampler (a one-token public support)."""
    from dpsynrag.transforms.private_prediction import candidate_ids

    name = "chest pain fever"
    ids = candidate_ids(llm, [name])[0]
    eos = next(iter(llm.eos_token_ids))
    seen: dict[int, torch.Tensor] = {}

    def scripted(votes: torch.Tensor, active: list[int]) -> np.ndarray:
        step = len(seen)
        seen[step] = votes[0].clone()
        return np.asarray([ids[step] if step < 2 else int(torch.argmax(votes[0]))])

    private_predict(llm, [["red green blue"]], prompt=PROMPT, max_new_tokens=3, clip=CLIP,
                    temperature=1.0, rng=secure_rng(0), sampler=scripted,
                    public_prior=_settings(candidates=(name,), top_k=4))
    assert int(torch.isfinite(seen[2]).sum()) == 1 and torch.isfinite(seen[2][ids[2]])
    assert eos != ids[2]


@pytest.mark.parametrize("candidate_support,trie_completion", [(False, True), (True, False),
                                                              (False, False)])
def test_ablated_levers_keep_engine_and_reference_equal(
        llm: LoadedLLM, candidate_support: bool, trie_completion: bool) -> None:
    """--writer-ablate candidates / trie: the packed engine still equals the audit reference,
    and without candidate support the support is the public top-k plus EOS only."""
    from dataclasses import replace

    groups = _groups("mixed")
    eos = next(iter(llm.eos_token_ids))
    script = Scripted(llm.vocab_size, eos, {0: 1, 3: 3, 4: 0})
    settings = replace(_settings(), candidate_support=candidate_support,
                       trie_completion=trie_completion)
    assert settings.subset([0]).candidate_support is candidate_support
    assert settings.subset([0]).trie_completion is trie_completion
    private_predict(llm, groups, prompt=PROMPT, max_new_tokens=4, clip=CLIP, temperature=0.7,
                    rng=secure_rng(0), sampler=script, public_prior=settings)
    assert script.votes
    for (g, step), votes in script.votes.items():
        expected = aggregated_prior_votes(llm, groups[g], prompt=PROMPT,
                                          generated=script.tokens[g][:step], clip=CLIP,
                                          temperature=0.7, public_prior=settings)
        assert torch.equal(torch.isinf(votes), torch.isinf(expected))
        finite = torch.isfinite(expected)
        torch.testing.assert_close(votes[finite], expected[finite], rtol=0, atol=2e-5)
        if not candidate_support:
            assert int(finite.sum()) <= settings.top_k + len(llm.eos_token_ids)


def test_without_trie_completion_a_begun_candidate_is_not_forced(llm: LoadedLLM) -> None:
    """The trie-completion test's script with the lever off: the third step's support is the
    public top-k plus extras again, not the candidate's one next token."""
    from dataclasses import replace

    name = "chest pain fever"
    ids = candidate_ids(llm, [name])[0]
    seen: dict[int, torch.Tensor] = {}

    def scripted(votes: torch.Tensor, active: list[int]) -> np.ndarray:
        step = len(seen)
        seen[step] = votes[0].clone()
        return np.asarray([ids[step] if step < 2 else int(torch.argmax(votes[0]))])

    settings = replace(_settings(candidates=(name,), top_k=4), trie_completion=False)
    private_predict(llm, [["red green blue"]], prompt=PROMPT, max_new_tokens=3, clip=CLIP,
                    temperature=1.0, rng=secure_rng(0), sampler=scripted, public_prior=settings)
    assert int(torch.isfinite(seen[2]).sum()) >= settings.top_k
    assert torch.isfinite(seen[2][ids[2]])  # still in the support (a candidate's next token)


def test_a_document_row_with_non_finite_logits_votes_zero_and_public_ones_raise() -> None:
    torch.manual_seed(3)
    private, public = torch.randn(3, 20), torch.randn(3, 20)
    support = torch.zeros(3, 20, dtype=torch.bool)
    support[:, :8] = True
    clean = difference_clip(private, public, support, 0.5)
    private[1, 2] = float("nan")
    private[2, 15] = float("inf")  # off the support: ignored, as before
    out = difference_clip(private, public, support, 0.5)
    assert torch.all(out[1] == 0)  # the bad row's vote: zero
    assert torch.equal(out[0], clean[0]) and torch.equal(out[2], clean[2])
    public[0, 3] = float("nan")
    with pytest.raises(ValueError, match="public logits"):
        difference_clip(private, public, support, 0.5)
