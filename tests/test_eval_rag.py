"""RAG evaluation: the corpus index finds the right neighbours and loads a build's output;
prompts have the documented shape; greedy answers are deterministic and batch independent."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch
from test_private_prediction import tiny_llm

from dpsynrag.eval.rag import CorpusIndex
from dpsynrag.models.greedy import answer_questions
from dpsynrag.models.llm import LoadedLLM
from dpsynrag.prompts.rag import DEFAULT_INSTRUCTION, answer_prompt, no_context_prompt
from dpsynrag.transforms.emit import write_output


class BowEmbedder:
    """Deterministic bag-of-words vectors: each word adds 1 to coordinate crc32(word) % 512."""

    name = "bow-embedder"
    dimension = 512
    identity: ClassVar[dict[str, str]] = {"name": "bow-embedder", "sha256": "cd" * 32}

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, zlib.crc32(word.encode()) % self.dimension] += 1.0
        return out  # not normalised: the index must normalise


TEXTS = [
    "velarin syndrome causes red ears and a dry cough",
    "dorvan fever brings tingling in the nostril",
    "kalum disease means blurred vision at night",
    "a note about nothing in particular",
    "velarin syndrome patients cough at night",
]


def test_search_returns_nearest_texts_best_first() -> None:
    index = CorpusIndex(TEXTS, BowEmbedder())
    assert len(index) == 5 and index.dimension == 512
    assert index.ids == ["0", "1", "2", "3", "4"]
    hits = index.search(["tingling nostril", "blurred vision night", "velarin syndrome cough"],
                        k=2)
    assert hits[0][0] == 1
    assert hits[1][0] == 2
    assert sorted(hits[2]) == [0, 4]
    assert all(len(row) == 2 for row in hits)
    assert index.search_texts(["tingling nostril"], k=1) == [[TEXTS[1]]]
    # k larger than the corpus returns every row once; no queries, no work.
    assert sorted(index.search(["cough"], k=50)[0]) == [0, 1, 2, 3, 4]
    assert index.search([], k=3) == []
    with pytest.raises(ValueError):
        index.search(["cough"], k=0)
    with pytest.raises(TypeError):
        index.search("cough", k=1)


def test_precomputed_vectors_and_empty_corpus() -> None:
    embedder = BowEmbedder()
    vectors = embedder.encode(TEXTS)
    index = CorpusIndex(TEXTS, embedder, vectors=vectors * 7.0, ids=list("abcde"))
    assert embedder.calls == 1  # the texts were not re-encoded
    assert index.search(["dorvan fever"], k=1) == [[1]]
    assert index.ids[1] == "b"
    empty = CorpusIndex([], embedder)
    assert len(empty) == 0
    assert empty.search(["cough", "fever"], k=3) == [[], []]
    with pytest.raises(ValueError):
        CorpusIndex(TEXTS, embedder, ids=["only-one"])
    with pytest.raises(ValueError):
        CorpusIndex(TEXTS, embedder, vectors=vectors[:2])


def _write(tmp_path: Path, kept: list[bool]) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    write_output(out, texts=TEXTS, cluster_keywords=["k"] * len(TEXTS), kept=kept,
                 token_counts=[len(t.split()) for t in TEXTS], embedder=BowEmbedder())
    return out


def test_from_build_output_round_trips_and_drops_rejected_rows(tmp_path: Path) -> None:
    kept = [True, False, True, True, False]
    out = _write(tmp_path, kept)
    embedder = BowEmbedder()
    everything = CorpusIndex.from_build_output(out, embedder, kept_only=False)
    assert embedder.calls == 0  # stored vectors are reused
    assert everything.texts == TEXTS
    assert everything.ids == [f"syn-{i:05d}" for i in range(5)]
    direct = CorpusIndex(TEXTS, BowEmbedder())
    queries = ["tingling nostril", "blurred vision night", "velarin cough", "nothing"]
    assert everything.search(queries, k=3) == direct.search(queries, k=3)

    kept_index = CorpusIndex.from_build_output(out, embedder)
    assert kept_index.texts == [TEXTS[0], TEXTS[2], TEXTS[3]]
    assert kept_index.ids == ["syn-00000", "syn-00002", "syn-00003"]
    # The dropped row 1 is the best match for this query in the full index only.
    assert everything.search(["dorvan fever tingling"], k=1) == [[1]]
    best = kept_index.search_texts(["dorvan fever tingling"], k=3)[0]
    assert TEXTS[1] not in best and len(best) == 3
    assert kept_index.search(["blurred vision night"], k=1) == [[1]]  # row 2 is now position 1
    np.testing.assert_allclose(
        kept_index.index.reconstruct_n(0, 3), everything.index.reconstruct_n(0, 5)[[0, 2, 3]])


def test_from_build_output_checks(tmp_path: Path) -> None:
    out = _write(tmp_path, [False] * 5)
    assert len(CorpusIndex.from_build_output(out, BowEmbedder())) == 0

    class Narrow(BowEmbedder):
        dimension = 8

    with pytest.raises(ValueError, match="dimension"):
        CorpusIndex.from_build_output(out, Narrow())

    class Other(BowEmbedder):
        identity: ClassVar[dict[str, str]] = {"name": "other", "sha256": "ef" * 32}

    with pytest.raises(ValueError, match="different weights"):
        CorpusIndex.from_build_output(out, Other())
    with pytest.raises(FileNotFoundError):
        CorpusIndex.from_build_output(tmp_path / "missing", BowEmbedder())


def test_prompts() -> None:
    prompt = answer_prompt("What do I have?", ["first  passage\nwith lines", "second"])
    assert prompt == ("Context:\n[1] first passage with lines\n[2] second\n\n"
                      f"Question: What do I have?\n{DEFAULT_INSTRUCTION}")
    assert no_context_prompt(" What do I have? ") == (
        f"Question: What do I have?\n{DEFAULT_INSTRUCTION}")
    assert answer_prompt("Q?", [], instruction="Answer briefly.") == "Question: Q?\nAnswer briefly."
    assert answer_prompt("Q?", ["p"], instruction="Name the drug.").endswith(
        "Question: Q?\nName the drug.")
    with pytest.raises(TypeError):
        answer_prompt("Q?", "a single string")


# ------------------------------------------------------------------ greedy answers
@pytest.fixture(scope="module")
def llm() -> LoadedLLM:
    return tiny_llm(seed=3)


PROMPTS = [
    "patient fever",
    "rewrite the following note : alpha beta gamma delta epsilon zeta eta theta iota kappa "
    "lambda mu nu xi omicron pi rho sigma tau",
    "doctor cough pain head chest one two three",
    "red",
    "green blue cyan magenta yellow black white one two three four five six seven eight nine "
    "ten alpha beta gamma delta",
]


def _unpadded_greedy(llm: LoadedLLM, prompt: str, max_new_tokens: int) -> str:
    ids = torch.tensor([llm.chat_prompt_ids(prompt)])
    eos = sorted(llm.eos_token_ids)
    with torch.inference_mode():
        out = llm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=eos[0], eos_token_id=eos, temperature=None,
                                 top_p=None, top_k=None)
    tokens = out[0, ids.shape[1]:].tolist()
    tokens = tokens[:tokens.index(eos[0])] if eos[0] in tokens else tokens
    return llm.tokenizer.decode(tokens, skip_special_tokens=True).strip()


def test_answer_questions_deterministic_and_batch_independent(llm: LoadedLLM) -> None:
    first = answer_questions(llm, PROMPTS, max_new_tokens=6, batch_size=2)
    assert len(first) == len(PROMPTS) and all(isinstance(a, str) for a in first)
    assert any(first)
    assert answer_questions(llm, PROMPTS, max_new_tokens=6, batch_size=2) == first
    for batch_size in (1, 3, 8):
        assert answer_questions(llm, PROMPTS, max_new_tokens=6, batch_size=batch_size) == first
    # Left padding with the attention mask gives what each prompt gives alone, unpadded.
    assert first == [_unpadded_greedy(llm, p, 6) for p in PROMPTS]
    # Only new tokens are decoded, at most max_new_tokens of them.
    assert all(len(a.split()) <= 1 for a in answer_questions(llm, PROMPTS, max_new_tokens=1))
    assert answer_questions(llm, [answer_prompt("patient fever", ["red cough"])])[0] == (
        answer_questions(llm, [answer_prompt("patient fever", ["red cough"]), "red"])[0])


def test_answer_questions_arguments(llm: LoadedLLM) -> None:
    assert answer_questions(llm, []) == []
    with pytest.raises(ValueError):
        answer_questions(llm, ["red"], batch_size=0)
    with pytest.raises(ValueError):
        answer_questions(llm, ["red"], max_new_tokens=0)
    with pytest.raises(TypeError):
        answer_questions(llm, "red")
