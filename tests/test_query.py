"""Query-time mechanisms end to end on a tiny model: DP-RAG, DP-KSA, (Sparse)VoteRAG, the
service's charge-first rule and the ``dpsynrag query`` CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_build import HashEmbedder
from test_private_prediction import WORDS, tiny_llm

from dpsynrag.accounting.conversions import rho_for
from dpsynrag.accounting.corpus_ledger import CorpusLedger
from dpsynrag.accounting.costs import spend_of
from dpsynrag.accounting.rng import secure_rng
from dpsynrag.prompts.query import document_prompt
from dpsynrag.prompts.rag import no_context_prompt
from dpsynrag.query import dp_ksa, dp_rag, sparse_vote
from dpsynrag.query.private_corpus import PrivateCorpus
from dpsynrag.query.service import QueryService, make_settings
from dpsynrag.transforms.private_prediction import aggregated_logits, render_prompt


@pytest.fixture(scope="module")
def llm():
    return tiny_llm()


def _corpus(n: int = 24, seed: int = 0) -> PrivateCorpus:
    rs = np.random.default_rng(seed)
    texts = [" ".join(rs.choice(WORDS[:-8], 12)) for _ in range(n)]
    return PrivateCorpus.from_texts([f"doc-{i}" for i in range(n)], texts, HashEmbedder())


def _paid(tmp_path: Path, corpus: PrivateCorpus, method: str, settings, n: int) -> list:
    """``n`` receipts of committed charges for ``settings`` (an explicitly uncapped ledger)."""
    import uuid

    corpus.bind(tmp_path / "paid.sqlite")  # the receipts open this corpus only
    with CorpusLedger(tmp_path / "paid.sqlite") as ledger:
        return [ledger.charge(f"q-{uuid.uuid4().hex}", kind="query", method=method,
                              mechanisms=settings.mechanisms(),
                              privacy_unit=corpus.privacy_unit, allow_no_cap=True).receipt
                for _ in range(n)]


# ---------------------------------------------------------------------- private corpus
def test_exact_top_breaks_ties_by_text_hash_not_position_or_id() -> None:
    texts = [f"note {i}" for i in range(6)]
    vectors = np.tile(np.eye(4, dtype=np.float32)[0], (6, 1))  # all documents tie
    forward = PrivateCorpus([f"d{i}" for i in range(6)], texts, vectors)
    # reversed order and other ids (ids are row numbers when the input has no id column)
    backward = PrivateCorpus([f"row-{i}" for i in range(6)], texts[::-1], vectors[::-1])
    query = np.eye(4, dtype=np.float32)[0]
    top_f = [forward.texts[i] for i in forward.exact_top(forward.similarities(query), 3)]
    top_b = [backward.texts[i] for i in backward.exact_top(backward.similarities(query), 3)]
    assert top_f == top_b


def test_voter_partition_depends_only_on_each_document() -> None:
    corpus = _corpus(30)
    voters = corpus.voter_of(7)
    smaller = PrivateCorpus([f"row-{i}" for i in range(25)], corpus.texts[5:],
                            corpus.vectors[5:])
    assert list(smaller.voter_of(7)) == list(voters[5:])
    assert set(voters) <= set(range(7))


# ---------------------------------------------------------------------- DP-RAG
def test_dp_rag_spends_exactly_the_query_budget() -> None:
    settings = dp_rag.DPRagSettings(epsilon=5.0, delta=1e-3, retrieval_epsilon=0.5,
                                    max_new_tokens=70)
    rho, delta = spend_of(settings.mechanisms())
    assert math.isclose(rho, rho_for(5.0, 1e-3, "bun-steinke"), rel_tol=1e-12)
    assert delta == 0.0
    # docs/mechanisms.md table V3: epsilon 5 at delta 1e-3 with eps_ret 0.5 over 70 tokens
    assert settings.token_epsilon() == pytest.approx(0.2716, abs=1e-4)


def test_dp_rag_refuses_a_budget_that_leaves_nothing_for_tokens() -> None:
    with pytest.raises(ValueError, match="nothing for generation"):
        dp_rag.DPRagSettings(epsilon=0.01, retrieval_epsilon=5.0)


def test_dp_rag_top_k_retrieval_with_a_large_budget_keeps_about_k() -> None:
    corpus = _corpus(40)
    query = corpus.vectors[3]
    settings = dp_rag.DPRagSettings(epsilon=5000.0, retrieval_epsilon=100.0, mode="top-k",
                                    top_k=5, score_low=-1.0, score_high=1.0)
    sizes = [len(dp_rag.select_documents(corpus, query, settings, secure_rng(s)))
             for s in range(20)]
    assert np.median(sizes) == 5
    chosen = dp_rag.select_documents(corpus, query, settings, secure_rng(0))
    best = corpus.exact_top(corpus.similarities(query), len(chosen))
    assert sorted(chosen) == sorted(best)  # the threshold keeps the highest scores


def test_dp_rag_votes_are_the_clipped_sum_of_the_selected_documents(
        llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _corpus(24)
    question = " ".join(WORDS[:6])
    settings = dp_rag.DPRagSettings(epsilon=8.0, max_new_tokens=1, mode="top-k", top_k=4,
                                    retrieval_epsilon=2.0)
    seen: list[torch.Tensor] = []
    real = dp_rag.sample_tokens

    def spy(utility, temperature, rng):
        seen.append(utility.clone())
        assert temperature == pytest.approx(settings.temperature())
        return real(utility, temperature, rng)

    monkeypatch.setattr(dp_rag, "sample_tokens", spy)
    selected = dp_rag.select_documents(corpus, HashEmbedder().encode([question])[0], settings,
                                       secure_rng(11))
    dp_rag.answer([question], corpus, llm, HashEmbedder(), settings, secure_rng(11),
                  receipts=_paid(tmp_path, corpus, "dp-rag", settings, 1))
    docs = [corpus.texts[i] for i in selected]
    reference = aggregated_logits(llm, docs, prompt=document_prompt(question,
                                                                    settings.instruction),
                                  generated=[], clip=settings.clip)
    assert len(seen) == 1
    torch.testing.assert_close(seen[0][0], reference, atol=2e-5, rtol=1e-5)


def test_dp_rag_prior_uses_the_public_no_context_distribution(
        llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _corpus(10)
    settings = dp_rag.DPRagSettings(epsilon=3.0, max_new_tokens=2, prior_weight=0.5)
    answers = dp_rag.answer(["alpha question", "beta question"], corpus, llm, HashEmbedder(),
                            settings, secure_rng(3),
                            receipts=_paid(tmp_path, corpus, "dp-rag", settings, 2))
    assert len(answers) == 2 and all(isinstance(a, str) for a in answers)


# ---------------------------------------------------------------------- (Sparse)VoteRAG
def test_greedy_vote_rows_are_one_hot_at_the_argmax() -> None:
    logits = torch.tensor([[0.1, 2.0, 2.0, -1.0], [5.0, 0.0, 0.0, 0.0]])
    votes = sparse_vote.greedy_vote(logits)
    assert votes.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


def test_vote_with_unanimous_voters_releases_their_greedy_tokens(llm, tmp_path: Path) -> None:
    text = " ".join(WORDS[:10])
    corpus = PrivateCorpus.from_texts([f"same-{i}" for i in range(40)], [text] * 40,
                                      HashEmbedder())
    # equal texts share a voter (the partition reads only the text): spread them by hand
    corpus.voter_of = lambda m: np.arange(len(corpus)) % m  # type: ignore[method-assign]
    settings = sparse_vote.SparseVoteSettings(
        epsilon=400.0, delta=1e-4, token_epsilon=50.0, token_delta=1e-6, voters=6,
        sparse=False, max_tokens=5)
    assert settings.private_tokens() == 8
    [reply] = sparse_vote.answer(["what now"], corpus, llm, HashEmbedder(), settings,
                                 secure_rng(0),
                                 receipts=_paid(tmp_path, corpus, "vote", settings, 1))
    # every voter holds the same document: the greedy continuation of that one prompt
    ids = llm.chat_prompt_ids(render_prompt(document_prompt("what now", settings.instruction),
                                            text))
    greedy: list[int] = []
    with torch.inference_mode():
        for _ in range(5):
            logits = llm.model(input_ids=torch.tensor([ids + greedy])).logits[0, -1]
            token = int(torch.argmax(logits))
            if token in llm.eos_token_ids:
                break
            greedy.append(token)
    assert reply == llm.tokenizer.decode(greedy, skip_special_tokens=True)


def test_sparse_vote_never_releases_more_private_tokens_than_c_max(
        llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _corpus(60)
    settings = sparse_vote.SparseVoteSettings(epsilon=10.0, token_epsilon=2.0, voters=8,
                                              max_tokens=12)
    budget = settings.private_tokens()
    assert budget == 5  # Koga: sequential (2, 10) -> 5
    calls: list[np.ndarray] = []
    real = sparse_vote.limited_domain_top1

    def counting(counts, *args, **kwargs):
        calls.append(np.asarray(counts).copy())
        return real(counts, *args, **kwargs)

    monkeypatch.setattr(sparse_vote, "limited_domain_top1", counting)
    questions = ["alpha beta", "gamma delta", "what is it"]
    sparse_vote.answer(questions, corpus, llm, HashEmbedder(), settings, secure_rng(5),
                       receipts=_paid(tmp_path, corpus, "sparse-vote", settings, 3))
    assert len(calls) <= budget * len(questions)
    assert all(c.sum() == pytest.approx(settings.voters) for c in calls)  # one vote each


def test_sparse_vote_charges_its_koga_composition() -> None:
    settings = make_settings("sparse-vote", 10.0, token_epsilon=1.0)
    [entry] = settings.mechanisms()
    assert entry["params"]["steps"] == 10
    with pytest.raises(ValueError, match="one private token"):
        make_settings("vote", 2.0, token_epsilon=5.0)


# ---------------------------------------------------------------------- DP-KSA
def test_ksa_words_are_normalised_by_a_public_rule() -> None:
    assert dp_ksa.normalise_words("The FLUMOX-fever, flumox-fever!", frozenset({"the"})) == \
        {"flumox-fever"}
    assert dp_ksa.normalise_words("Ｆｕｌｌ width", frozenset()) == {"full", "width"}


def test_ksa_releases_a_consensus_as_an_alphabetical_set() -> None:
    settings = dp_ksa.DPKsaSettings(epsilon=50.0, ensemble=40)
    responses = ["zorbax fever"] * 36 + ["something else"] * 4
    release = dp_ksa.release_keywords(responses, "what is my disease", settings,
                                      secure_rng(0))
    assert release.passed and release.keywords == ["fever", "zorbax"]
    shuffled = dp_ksa.release_keywords(list(reversed(responses)), "what is my disease",
                                       settings, secure_rng(0))
    assert shuffled.keywords == release.keywords


def test_ksa_fails_the_test_on_spread_answers_and_falls_back_to_non_rag(
        llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = dp_ksa.DPKsaSettings(epsilon=1.0, ensemble=20)
    spread = [f"word{i} other{i}" for i in range(20)]
    passes = sum(dp_ksa.release_keywords(spread, "q", settings, secure_rng(s)).passed
                 for s in range(50))
    assert passes == 0  # gap <= 2 everywhere: a pass has probability <= delta_ptr
    prompts: list[list[str]] = []
    monkeypatch.setattr("dpsynrag.query.dp_ksa.answer_questions",
                        lambda _llm, p, **_k: prompts.append(list(p)) or ["x"] * len(p))
    releases: list[dp_ksa.KeywordRelease] = []
    corpus = _corpus(5)
    dp_ksa.answer(["my question"], corpus, llm, HashEmbedder(), settings, secure_rng(1),
                  receipts=_paid(tmp_path, corpus, "dp-ksa", settings, 1),
                  responses=[spread], releases=releases)
    assert not releases[0].passed
    assert prompts[-1] == [no_context_prompt("my question", settings.instruction)]


def test_ksa_budget_split_adds_up() -> None:
    settings = dp_ksa.DPKsaSettings(epsilon=5.0, delta=1e-4, em_share=0.25)
    rho, delta = spend_of(settings.mechanisms())
    assert math.isclose(rho, rho_for(5.0, 5e-5, "bun-steinke"), rel_tol=1e-12)
    assert delta == pytest.approx(5e-5)


# ---------------------------------------------------------------------- service
def test_service_charges_before_computing_and_refuses_past_the_cap(
        llm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = CorpusLedger(tmp_path / "ledger.sqlite")
    ledger.set_cap(epsilon=10.0, delta=1e-3)  # affords 3 queries at 5
    service = QueryService(_corpus(12), ledger, llm, HashEmbedder(), rng=secure_rng(0))

    def explode(*_args, **_kwargs):
        assert len(ledger.entries()) == 1  # already charged when computing starts
        raise RuntimeError("crash after the charge")

    monkeypatch.setattr(dp_rag, "answer", explode)
    with pytest.raises(RuntimeError, match="crash"):
        service.ask(["q one"], method="dp-rag", epsilon=5.0, max_new_tokens=2)
    assert len(ledger.entries()) == 1  # a crashed query keeps its charge
    monkeypatch.undo()
    result = service.ask(["q two", "q three", "q four"], method="dp-rag", epsilon=5.0,
                         max_new_tokens=2)
    assert result.charged + result.refused == 3 and result.refused >= 1
    assert result.answers[-1] is None and "cap" in result.refusal_message
    assert result.refused == 1 and ledger.spent().epsilon <= 10.0 + 1e-9


# ---------------------------------------------------------------------- CLI
@pytest.fixture()
def tiny_models(monkeypatch: pytest.MonkeyPatch):
    model = tiny_llm()
    monkeypatch.setattr("dpsynrag.query.service.load_llm", lambda *_a, **_k: model)
    monkeypatch.setattr("dpsynrag.query.service.load_embedder",
                        lambda *_a, **_k: HashEmbedder())


def _notes(tmp_path: Path, n: int = 12) -> Path:
    import json

    rs = np.random.default_rng(1)
    path = tmp_path / "notes.jsonl"
    path.write_text("".join(json.dumps({"id": f"n{i}", "text": " ".join(rs.choice(WORDS, 10))})
                            + "\n" for i in range(n)))
    return path


def test_cli_query_answers_and_charges_the_corpus_ledger(tmp_path, tiny_models, capsys) -> None:
    from dpsynrag.cli import main

    notes, ledger = _notes(tmp_path), tmp_path / "ledger.sqlite"
    code = main(["query", "--corpus", str(notes), "--corpus-ledger", str(ledger), "--method",
                 "dp-rag", "--epsilon", "2", "--max-new-tokens", "2", "--json", "--no-cap",
                 "first question", "second question"])
    assert code == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert len(lines) == 2
    with CorpusLedger(ledger) as opened:
        assert [e.kind for e in opened.entries()] == ["query", "query"]


def test_cli_query_refused_by_the_cap_exits_3_and_computes_nothing(
        tmp_path, tiny_models, capsys) -> None:
    from dpsynrag.cli import main

    notes, ledger = _notes(tmp_path), tmp_path / "ledger.sqlite"
    assert main(["ledger", "cap", "--corpus-ledger", str(ledger), "--epsilon", "1",
                 "--delta", "1e-3"]) == 0
    code = main(["query", "--corpus", str(notes), "--corpus-ledger", str(ledger), "--method",
                 "dp-ksa", "--epsilon", "5", "a question"])
    assert code == 3
    err = capsys.readouterr().err
    assert "refused 1 question" in err and "nothing was computed" in err
    with CorpusLedger(ledger) as opened:
        assert opened.entries() == [] and opened.refusal_count() == 1


def test_a_refused_query_loads_no_model_and_reads_nothing(tmp_path, monkeypatch,
                                                         capsys) -> None:
    from dpsynrag.cli import main
    from dpsynrag.query.private_corpus import PrivateCorpus

    def tripwire(*_a, **_k):
        raise AssertionError("a refused query must not load a model or read the corpus")

    monkeypatch.setattr("dpsynrag.query.service.load_llm", tripwire)
    monkeypatch.setattr("dpsynrag.query.service.load_embedder", tripwire)
    monkeypatch.setattr(PrivateCorpus, "from_path", tripwire)
    notes, ledger = _notes(tmp_path), tmp_path / "ledger.sqlite"
    assert main(["ledger", "cap", "--corpus-ledger", str(ledger), "--epsilon", "1",
                 "--delta", "1e-3"]) == 0
    code = main(["query", "--corpus", str(notes), "--corpus-ledger", str(ledger), "--method",
                 "dp-rag", "--epsilon", "5", "first question", "second question"])
    assert code == 3
    assert "refused 2 question(s)" in capsys.readouterr().err
    with CorpusLedger(ledger) as opened:
        assert opened.entries() == [] and opened.refusal_count() == 2  # as the CLI said


@pytest.mark.parametrize("argv, message", [
    (["--method", "dp-rag", "--epsilon", "1"], "no question"),
    (["--method", "vote", "--epsilon", "2", "--set", "token_epsilon=5", "q"],
     "one private token"),
    (["--method", "dp-rag", "--epsilon", "1", "--set", "nonsense", "q"], "KEY=VALUE"),
])
def test_cli_query_bad_options_are_one_line_exit_2(tmp_path, tiny_models, capsys, argv,
                                                   message) -> None:
    from dpsynrag.cli import main

    code = main(["query", "--corpus", str(_notes(tmp_path)), "--corpus-ledger",
                 str(tmp_path / "l.sqlite"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err


def test_the_private_corpus_is_embedded_once_per_corpus_and_embedder(tmp_path) -> None:
    from dpsynrag.query.private_corpus import PrivateCorpus

    calls: list[int] = []

    class CountingEmbedder(HashEmbedder):
        def encode(self, texts, batch_size: int = 64):
            calls.append(len(texts))
            return super().encode(texts, batch_size)

    notes, cache = _notes(tmp_path), tmp_path / "cache"
    first = PrivateCorpus.from_path(notes, CountingEmbedder(), cache_dir=cache)
    again = PrivateCorpus.from_path(notes, CountingEmbedder(), cache_dir=cache)
    assert calls == [12] and np.array_equal(first.vectors, again.vectors)
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert all(oct(f.stat().st_mode & 0o777) == "0o600" for f in cache.iterdir())
    with notes.open("a") as handle:  # a changed corpus is embedded anew
        handle.write('{"id": "n99", "text": "one more note about a rash"}\n')
    PrivateCorpus.from_path(notes, CountingEmbedder(), cache_dir=cache)
    assert calls == [12, 13] and len(list(cache.glob("query-vectors-*.npy"))) == 2


def test_the_query_vector_cache_is_keyed_private_and_purged(tmp_path, monkeypatch) -> None:
    """Its names are an HMAC under a key of its own (not a hash anyone can recompute from a
    guessed corpus), it lives in the user's cache and not beside the ledger, and old or
    surplus entries are deleted."""
    import hashlib

    from dpsynrag.query import private_corpus as pc

    monkeypatch.setenv("DPSYNRAG_CACHE_DIR", str(tmp_path / "user-cache"))
    assert pc.query_cache_dir() == tmp_path / "user-cache" / "query-vectors"
    ids, texts = ["a", "b"], ["first private note", "second private note"]
    pc.cached_vectors(None, ids, texts, HashEmbedder(), now=1_000_000.0)
    cache = pc.query_cache_dir()
    [entry] = cache.glob("query-vectors-*.npy")
    identity = json.dumps(dict(HashEmbedder().identity), sort_keys=True, default=str).encode()
    unkeyed = hashlib.sha256(identity)
    for doc_id, text in zip(ids, texts, strict=True):
        unkeyed.update(b"\0" + doc_id.encode() + b"\1" + text.encode())
    assert unkeyed.hexdigest()[:32] not in entry.name
    assert oct((cache / ".key").stat().st_mode & 0o777) == "0o600"
    for i in range(pc.CACHE_MAX_ENTRIES + 3):  # other corpora, a minute apart
        pc.cached_vectors(None, [f"x{i}"], [f"other note {i}"], HashEmbedder(),
                          now=1_000_000.0 + 60.0 * i)
    assert len(list(cache.glob("query-vectors-*.npy"))) == pc.CACHE_MAX_ENTRIES
    assert not entry.exists()  # the least recently used went first
    late = 1_000_000.0 + pc.CACHE_MAX_AGE_S + 3600.0
    pc.cached_vectors(None, ["new"], ["a new note"], HashEmbedder(), now=late)
    assert len(list(cache.glob("query-vectors-*.npy"))) == 1  # a week unused: deleted


def test_the_private_corpus_reads_several_text_columns_as_the_build(tmp_path) -> None:
    from dpsynrag.io.reader import read_documents
    from dpsynrag.query.private_corpus import PrivateCorpus

    notes = tmp_path / "tickets.jsonl"
    notes.write_text("".join(json.dumps(row) + "\n" for row in (
        {"id": "a", "subject": "Printer", "body": "It jams."},
        {"id": "b", "subject": None, "body": "VPN drops."})))
    corpus = PrivateCorpus.from_path(notes, HashEmbedder(), text_column=("subject", "body"))
    assert corpus.texts == ["Printer\n\nIt jams.", "VPN drops."]
    assert corpus.texts == read_documents(notes, text_column=("subject", "body")).texts
