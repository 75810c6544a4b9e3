"""``dpsynrag search``: the texts of a built corpus nearest to questions, and optionally a
reader's answer from them.

It reads only the output directory (the hand-off, no private data) through
``dpsynrag.handoff``: each question is embedded with the embedder the manifest names (the
packaged all-MiniLM-L6-v2, or ``--embedder``, loaded offline and checked against the
manifest) and searched in the stored ``index.faiss`` (no re-embedding of the corpus), over the
texts the self-filter kept. With ``--answer`` the packaged SmolLM2 reader (or ``--model``)
answers each question greedily from its top texts, in the prompt the evaluation's RAG reader
uses (``dpsynrag.prompts.rag.answer_prompt``). Searching the synthetic corpus costs no privacy
budget: it is post-processing of a released corpus. Nothing is downloaded.

Exit codes: 0 searched; 1 a model failed to load; 2 bad options, a missing directory, a
directory that is not a corpus (or fails its manifest's checks), a corpus a build is writing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsynrag.cli.errors import CliError, ExitCode
from dpsynrag.cli.options import positive_int
from dpsynrag.cli.show import load_corpus_dir

if TYPE_CHECKING:
    from dpsynrag.handoff import Hit

__all__ = ["DEFAULT_SEARCH_INSTRUCTION", "add_parser", "reader_prompts", "run_search"]

#: What the reader is asked for after the question (public; ``--instruction`` replaces it).
DEFAULT_SEARCH_INSTRUCTION = "Answer in a few words, from the context only."


def add_parser(subparsers: Any) -> None:
    """Add ``search`` to the ``dpsynrag`` subcommands."""
    parser = subparsers.add_parser(
        "search", help="search a built synthetic corpus for questions (no privacy cost); "
                       "--answer also answers them with the packaged reader",
        description="Embed each question with the corpus's own embedder (offline) and print "
                    "the k nearest synthetic texts: rank, cosine score, text id and text. "
                    "With --answer the packaged SmolLM2-135M reader answers each question "
                    "from its top texts, printed first, then its sources. Reads only the "
                    "output directory (no private data); costs no privacy budget.",
        epilog="Example: dpsynrag search demo-output/corpus \"What helps a migraine?\" "
               "--k 3 --answer")
    parser.add_argument("out_dir", type=Path, metavar="OUT",
                        help="a build-corpus output directory")
    parser.add_argument("questions", nargs="+", metavar="QUESTION",
                        help="question text(s); several are searched with one model load")
    parser.add_argument("--k", type=positive_int, default=5, metavar="K",
                        help="texts per question (default 5)")
    parser.add_argument("--answer", action="store_true",
                        help="also answer each question from its top K texts with the reader "
                             "(loads the LLM: a few seconds)")
    parser.add_argument("--instruction", default=DEFAULT_SEARCH_INSTRUCTION,
                        help="--answer: what the reader is told after the question (default "
                             f"{DEFAULT_SEARCH_INSTRUCTION!r})")
    parser.add_argument("--model", default=None,
                        help="--answer: local LLM directory or .gguf file (default: the "
                             "packaged SmolLM2-135M-Instruct)")
    parser.add_argument("--embedder", default=None,
                        help="local copy of the embedder the corpus was built with (default: "
                             "the packaged all-MiniLM-L6-v2, which the manifest must name)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per question")
    parser.set_defaults(handler=run_search)


def reader_prompts(questions: Sequence[str], hits: Sequence[Sequence[Hit]],
                   instruction: str = DEFAULT_SEARCH_INSTRUCTION) -> list[str]:
    """The reader's user message for each question: its retrieved texts, best first, then the
    question and ``instruction`` (no retrieved text: the question alone)."""
    from dpsynrag.prompts.rag import answer_prompt

    return [answer_prompt(question, [hit.text for hit in found], instruction=instruction)
            for question, found in zip(questions, hits, strict=True)]


def _hits_json(found: Sequence[Hit]) -> list[dict[str, Any]]:
    return [{"rank": rank, "score": hit.score, "id": hit.id, "row": hit.row, "text": hit.text,
             "cluster_keyword": hit.cluster_keyword}
            for rank, hit in enumerate(found, 1)]


def run_search(args: argparse.Namespace) -> int:
    """Search (and with ``--answer`` answer) each question; print the results."""
    questions = [" ".join(q.split()) for q in args.questions]
    if not all(questions):
        raise CliError("an empty QUESTION was given")
    if not args.instruction.strip():
        raise CliError("--instruction must not be empty")
    loaded = load_corpus_dir(args.out_dir)
    # torch and the models: loaded only once a corpus is found
    from dpsynrag.handoff import CorpusIntegrityError, load_query_embedder, search_texts
    from dpsynrag.models.errors import ModelLoadError

    try:
        embedder = load_query_embedder(loaded, args.embedder)
    except CorpusIntegrityError as error:
        raise CliError(f"{args.out_dir}: {error}", ExitCode.BAD_INPUT) from None
    except ModelLoadError as error:
        raise CliError(str(error), ExitCode.FAILURE) from None
    except ValueError as error:  # the corpus names another embedder than the packaged one
        raise CliError(f"{args.out_dir}: {error} (--embedder PATH)", ExitCode.BAD_INPUT) from None
    hits = search_texts(loaded, questions, args.k, embedder=embedder)
    answers: list[str | None] = [None] * len(questions)
    if args.answer:
        from dpsynrag.models.greedy import answer_questions
        from dpsynrag.models.llm import load_llm

        asked = [i for i, found in enumerate(hits) if found]  # no text: nothing to answer from
        if asked:
            print(f"answering {len(asked)} question(s) with "
                  f"{'the packaged SmolLM2-135M-Instruct' if args.model is None else args.model}"
                  " from the retrieved texts ...", file=sys.stderr, flush=True)
            try:
                llm = load_llm(args.model)
            except ModelLoadError as error:
                raise CliError(str(error), ExitCode.FAILURE) from None
            prompts = reader_prompts([questions[i] for i in asked], [hits[i] for i in asked],
                                     args.instruction)
            replies = answer_questions(llm, prompts)  # the evaluation reader's cap
            for i, text in zip(asked, replies, strict=True):
                answers[i] = text
    for number, (question, found, reply) in enumerate(zip(questions, hits, answers,
                                                          strict=True)):
        if args.json:
            record: dict[str, Any] = {"question": question, "hits": _hits_json(found)}
            if args.answer:
                record["answer"] = reply
            print(json.dumps(record))
            continue
        if number:
            print()
        print(f"Q: {question}")
        if args.answer:
            print(f"A: {(reply or '(no answer)') if found else '(no text retrieved: none)'}")
            print("sources:")
        if not found:
            print("  (no text: the corpus has no kept text)")
        for rank, hit in enumerate(found, 1):
            print(f"  {rank}. {hit.score:.3f}  {hit.id}  {' '.join(hit.text.split())}")
    return ExitCode.OK
