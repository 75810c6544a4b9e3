"""``dpsynrag show`` and ``dpsynrag search`` on a real facts-mode corpus (packaged embedder,
unseeded, signed), built once for the module; their one-line errors; and ``--answer``'s prompt
and output order with a stand-in reader (the packaged LLM is too slow for a unit test)."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from dpsynrag.accounting.signing import generate_keypair
from dpsynrag.cli.app import main
from dpsynrag.cli.search import DEFAULT_SEARCH_INSTRUCTION, reader_prompts
from dpsynrag.cli.show import sample_rows
from dpsynrag.eval.datasets import write_clinic_dataset
from dpsynrag.handoff import Hit
from dpsynrag.pipeline.build import run_build
from dpsynrag.pipeline.config import make_config
from dpsynrag.pipeline.runners import LocalRunner
from dpsynrag.pipeline.state import OutputLock

N_NOTES, N_DISEASES, DATA_SEED = 200, 3, 5


class NoLLM:
    """Facts mode never calls the language model: any use fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"facts mode used the language model ({name})")


@pytest.fixture(scope="module")
def network_attempts() -> Iterator[list[Any]]:
    """Every socket connection or name lookup fails (and is recorded) while this module runs:
    nothing may be downloaded."""
    attempts: list[Any] = []

    def deny(*args: Any, **kwargs: Any) -> None:
        attempts.append(args[:2])
        raise OSError("network disabled by tests/test_cli_show_search.py")

    with pytest.MonkeyPatch.context() as patch:
        for name in ("connect", "connect_ex"):
            patch.setattr(socket.socket, name, deny)
        patch.setattr(socket, "getaddrinfo", deny)
        patch.setattr(socket, "create_connection", deny)
        yield attempts


@pytest.fixture(scope="module")
def embedder(network_attempts: list[Any]) -> Any:
    from dpsynrag.models.embedder import load_embedder

    return load_embedder(device="cpu")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> dict[str, Any]:
    """A facts build of a small fictitious clinic, unseeded (search refuses a seeded corpus,
    verify fails it) and signed, embedded with the packaged embedder."""
    tmp = tmp_path_factory.mktemp("show-search")
    paths = write_clinic_dataset(tmp / "data", n_notes=N_NOTES, n_diseases=N_DISEASES,
                                 seed=DATA_SEED)
    diseases = json.loads(Path(paths["diseases"]).read_text())["diseases"]
    generate_keypair(tmp / "key.pem", tmp / "key.pem.pub")
    config = make_config(None, {"generate": "facts", "runner": "local", "unit_column": "unit",
                                "epsilon": 10.0})
    summary = run_build(paths["notes"], tmp / "out", config, state_dir=tmp / "state",
                        signing_key=tmp / "key.pem", runner=LocalRunner(NoLLM(), embedder),
                        corpus_ledger=tmp / "corpus.sqlite", force=True)
    table = pq.read_table(tmp / "out" / "corpus.parquet")
    texts = table.column("text").to_pylist()
    assert len(texts) > 3 and all(table.column("kept").to_pylist())  # facts: no self-filter
    return {"out": tmp / "out", "texts": texts, "epsilon": summary.epsilon,
            "diseases": [d["name"] for d in diseases], "public_key": tmp / "key.pem.pub"}


@pytest.fixture
def reuse_embedder(monkeypatch: pytest.MonkeyPatch, embedder: Any) -> None:
    """``search`` gets the module's embedder instead of loading it again (saves seconds)."""
    monkeypatch.setattr("dpsynrag.models.embedder.load_embedder",
                        lambda path=None, device=None, **kwargs: embedder)


def _one_line_error(capsys: pytest.CaptureFixture[str], fragment: str) -> None:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("dpsynrag: error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out


# ---------------------------------------------------------------------- show
def test_show_counts_texts_and_reads_the_certificate(built: dict[str, Any],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(built["out"]), "--n", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["texts"] == len(built["texts"]) > 0
    assert summary["mode"] == "facts"
    cert = summary["certificate"]
    assert cert["epsilon"] == pytest.approx(built["epsilon"], rel=1e-12)
    assert cert["epsilon"] <= 10.0 * (1 + 1e-12) and cert["delta"] == pytest.approx(1e-3)
    assert cert["verified"] is True and cert["problems"] == [] and cert["seeded"] is False
    assert summary["embedder"]["name"] == "all-MiniLM-L6-v2"
    assert summary["embedder"]["dimension"] == 384
    assert {"corpus.parquet", "index.faiss", "manifest.json", "certificate.json"} \
        <= set(summary["files"])
    assert [item["text"] for item in summary["sample"]] == built["texts"][:2]


def test_show_text_names_epsilon_signature_and_the_first_texts(
        built: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(built["out"]), "--n", "3", "--public-key",
                 str(built["public_key"])]) == 0
    out = capsys.readouterr().out
    assert f"texts:       {len(built['texts'])}" in out
    assert "mode:        facts" in out
    assert "epsilon " in out and "verify (trusted key)" in out
    assert "all-MiniLM-L6-v2 (384 dimensions" in out
    shown = [line.split("  ", 2)[2] for line in out.splitlines() if line.startswith("  syn-")]
    assert shown == [" ".join(text.split()) for text in built["texts"][:3]]


def test_show_says_when_the_certificate_does_not_verify(
        built: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = Path(shutil.copytree(built["out"], tmp_path / "copy"))
    cert = json.loads((copy / "certificate.json").read_text())
    cert["guarantee"]["epsilon"] = 0.5  # a smaller claim than was spent
    (copy / "certificate.json").write_text(json.dumps(cert))
    assert main(["show", str(copy), "--n", "0"]) == 0  # shown; 'dpsynrag verify' fails it
    assert "DOES NOT VERIFY" in capsys.readouterr().out


def test_even_sample_spans_the_corpus() -> None:
    assert sample_rows(10, 3, spread=False) == [0, 1, 2]
    assert sample_rows(10, 3, spread=True) == [0, 4, 9]  # round half to even: 4.5 -> 4
    assert sample_rows(2, 5, spread=True) == [0, 1]
    assert sample_rows(10, 0, spread=True) == []


# ---------------------------------------------------------------------- search
def test_search_finds_the_cluster_of_a_released_name_offline(
        built: dict[str, Any], network_attempts: list[Any],
        capsys: pytest.CaptureFixture[str]) -> None:
    disease = next(d for d in built["diseases"] if any(d in t for t in built["texts"]))
    question = f"What is the treatment for {disease}?"
    assert main(["search", str(built["out"]), question, "--k", "3", "--json"]) == 0
    [record] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert record["question"] == question and "answer" not in record
    hits = record["hits"]
    assert [h["rank"] for h in hits] == [1, 2, 3]
    # the name's cluster among the first hits (the build's noise decides which of the notes
    # that hold a part of the name ranks first)
    assert any(disease in h["text"] for h in hits)
    assert all(h["text"] == built["texts"][h["row"]] for h in hits)
    assert network_attempts == []  # the packaged embedder, loaded from local files only


@pytest.mark.usefixtures("reuse_embedder")
def test_search_respects_k_sorts_scores_and_takes_several_questions(
        built: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    questions = [f"Which disease is {d}?" for d in built["diseases"][:2]]
    k = min(3, len(built["texts"]))
    assert main(["search", str(built["out"]), *questions, "--k", str(k), "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["question"] for r in records] == questions
    for record in records:
        scores = [h["score"] for h in record["hits"]]
        assert len(scores) == k and scores == sorted(scores, reverse=True)
        assert all(h["id"].startswith("syn-") for h in record["hits"])
    assert main(["search", str(built["out"]), questions[0], "--k", "1000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Q: {questions[0]}\n")
    assert f"  {len(built['texts'])}. " in out  # k larger than the corpus: every text once
    assert "A: " not in out


def test_search_answer_prints_the_answer_then_its_sources(
        built: dict[str, Any], monkeypatch: pytest.MonkeyPatch, reuse_embedder: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    prompts: list[str] = []

    def fake_answers(llm: Any, given: list[str], **kwargs: Any) -> list[str]:
        assert llm == "the reader"
        prompts.extend(given)
        return ["Answer one", "Answer two"]

    monkeypatch.setattr("dpsynrag.models.llm.load_llm", lambda path=None, **kw: "the reader")
    monkeypatch.setattr("dpsynrag.models.greedy.answer_questions", fake_answers)
    disease = built["diseases"][0]
    questions = [f"What is the treatment for {disease}?", "What else?"]
    assert main(["search", str(built["out"]), *questions, "--k", "2", "--answer",
                 "--instruction", "Answer with the name only."]) == 0
    out = capsys.readouterr().out
    first = out.split("\n\n")[0].splitlines()
    assert first[:3] == [f"Q: {questions[0]}", "A: Answer one", "sources:"]
    assert first[3].startswith("  1. ") and first[4].startswith("  2. ")
    assert len(prompts) == 2 and prompts[0].endswith(
        f"Question: {questions[0]}\nAnswer with the name only.")
    assert prompts[0].startswith("Context:\n[1] ") and "\n[2] " in prompts[0]


def test_reader_prompt_holds_the_hits_best_first() -> None:
    hits = [[Hit(0, "syn-0", "Diagnosis:  Gout.\nTreatment: Colchicine.", 0.9, "gout", True),
             Hit(1, "syn-1", "Diagnosis: Asthma.", 0.5, "asthma", True)], []]
    with_context, without = reader_prompts(["Red toe?", "Nothing found?"], hits)
    assert with_context == ("Context:\n[1] Diagnosis: Gout. Treatment: Colchicine.\n"
                            "[2] Diagnosis: Asthma.\n\n"
                            f"Question: Red toe?\n{DEFAULT_SEARCH_INSTRUCTION}")
    assert without == f"Question: Nothing found?\n{DEFAULT_SEARCH_INSTRUCTION}"


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("command", [["show"], ["search", "--k", "2"]])
def test_a_missing_directory_is_one_line_exit_2(command: list[str], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    args = [command[0], str(tmp_path / "nowhere"), *(["a question"] if command[0] == "search"
                                                     else []), *command[1:]]
    assert main(args) == 2
    _one_line_error(capsys, "no such directory")


@pytest.mark.parametrize("command", ["show", "search"])
def test_a_directory_that_is_not_a_corpus_is_one_line_exit_2(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.jsonl").write_text("{}\n")
    extra = ["a question"] if command == "search" else []
    assert main([command, str(tmp_path), *extra]) == 2
    _one_line_error(capsys, "not a dpsynrag corpus")


def test_a_corpus_missing_a_file_is_one_line_exit_2(built: dict[str, Any], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    copy = Path(shutil.copytree(built["out"], tmp_path / "copy"))
    (copy / "index.faiss").unlink()
    assert main(["search", str(copy), "a question"]) == 2
    _one_line_error(capsys, "index.faiss: missing")


@pytest.mark.parametrize("command", ["show", "search"])
def test_a_corpus_being_written_is_refused(command: str, built: dict[str, Any],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["a question"] if command == "search" else []
    with OutputLock(built["out"]):  # what a running build holds
        assert main([command, str(built["out"]), *extra]) == 2
    _one_line_error(capsys, "a build is writing this corpus now")
    new = built["out"].with_name("not-yet")
    with OutputLock(new):  # a first build: OUT does not exist yet
        assert main([command, str(new), *extra]) == 2
    _one_line_error(capsys, "a build is writing this corpus now")


def test_help_lists_show_and_search(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "\n    show " in out and "\n    search " in out
