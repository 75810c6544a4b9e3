"""The evaluation harness: the same data, model and embedder through every method.

Methods (DP-SynRAG's Table 1 rows):
* ``non-rag``: the LLM answers from the question alone;
* ``rag``: retrieval over the private notes themselves (epsilon = infinity);
* ``dp-synth``: private prediction on random batches without clustering (same epsilon);
* ``dp-synrag``: the full build (``pipeline.build.run_build``) at each epsilon;
* ablations of DP-SynRAG (the paper's Table 3) as extra methods: ``dp-synrag-hard``
  (L = 1), ``dp-synrag-no-filter`` (self-filter off), ``dp-synrag-no-retrieval`` (S_r = C_r);
* ``dp-synrag-writer``: the facts build with ``--writer tokens`` (issue 15: each kept
  cluster's note rewritten by the public-difference token sampler);
* ``dp-synrag-facts``: the build with ``--generate facts`` (issue 14: released phrases and
  one noisy fact histogram per cluster, no language model); ``facts-ceiling`` is its
  epsilon = infinity ceiling (the same rules and writer on exact counts, NOT private), so the
  loss due to the noise and the loss due to the representation can be told apart;
  ``tokens-ceiling`` is the token mode's: the ``dp-synrag`` build at epsilon = 10^6
  (``TOKENS_CEILING_EPSILON``), where every count is exact after rounding and one agreeing
  row carries a token (c/tau ~ 170: greedy decoding of the clipped, aggregated logits), NOT
  private;
* query-time mechanisms over the private notes (``eval.query_methods``): ``dp-rag``,
  ``dp-ksa``, ``sparse-vote``, where epsilon is PER QUERY and the run's total is reported.

Metrics per run: answer recall@k over the corpus under test, end-to-end accuracy (greedy answer
from the top-k texts contains the gold answer; a query with several accepted answers counts
when any of them is found), both also over the queries whose answer at least ``min_support``
(default 40, the paper's SearchQA rule) private notes hold (``*_supported``), the corpus's
readability (``span_share``: the share of its tokens inside token 3-grams that at least 2
private notes hold), leakage (outputs of benign and attack queries
containing a patient's full name; names and verbatim 8-word spans of private notes anywhere
in a synthetic corpus), wall time and rho. Each run's result is stored under
``REPORT/runs/`` as soon as it is known, and every DP build keeps its own state directory under
``REPORT/work/``: rerunning the same command skips finished runs and resumes a broken build.

The evaluation reads private data and prints only aggregate figures; its report is for the
data owner (it contains leakage counts computed from the private notes).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from dpsynrag.accounting.conversions import MAX_EPSILON, Conversion, rho_for
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.eval.datasets import load_qa_jsonl, make_clinic_dataset, write_clinic_dataset
from dpsynrag.eval.datasets_ordinary import (
    ORDINARY_KINDS,
    generation_recipe,
    make_ordinary_dataset,
    save_dataset,
)
from dpsynrag.eval.eval_data import EvalData
from dpsynrag.eval.methods import (
    ALL_METHODS,
    CEILING_METHODS,
    METHODS,
    PRIVATE_METHODS,
    QUERY_METHODS,
    TOKENS_CEILING_EPSILON,
)
from dpsynrag.eval.metrics import (
    MIN_SUPPORT,
    accuracy,
    answer_recall_at_k,
    name_leaks,
    names_in_corpus,
    span_share,
    supported_queries,
    verbatim_spans,
    weighted_recall_at_k,
)
from dpsynrag.eval.provenance import code_provenance
from dpsynrag.eval.query_methods import run_query_method
from dpsynrag.eval.rag import CorpusIndex
from dpsynrag.eval.report import write_markdown, write_plots
from dpsynrag.facts.fact_clusters import anchor_clusters, fact_counts, fact_domain
from dpsynrag.facts.fact_writer import FactRule, select_facts, write_notes
from dpsynrag.facts.phrases import document_phrases
from dpsynrag.facts.roles import OWN_ORDER_PRIORITIES, role_priority
from dpsynrag.facts.spans import SPAN_SEPARATOR
from dpsynrag.facts.term_choice import (
    CANDIDATES,
    anchor_terms,
    first_terms,
    released_choices,
)
from dpsynrag.facts.terms import document_terms
from dpsynrag.io.output_files import CORPUS_FILE
from dpsynrag.io.reader import read_documents
from dpsynrag.models.greedy import answer_questions, generate_greedy
from dpsynrag.models.lazy import LazyModels
from dpsynrag.models.protocols import LLM
from dpsynrag.pipeline.config import BuildConfig, ConfigError, make_config
from dpsynrag.pipeline.facts_stages import fact_keywords
from dpsynrag.pipeline.runners import LocalRunner, Runner
from dpsynrag.prompts.rag import answer_prompt, no_context_prompt
from dpsynrag.transforms.vocabulary import public_vocabulary

__all__ = ["ALL_METHODS", "CEILING_METHODS", "METHODS", "MIN_SUPPORT", "PRIVATE_METHODS",
           "QUERY_METHODS", "READER_FILE", "TOKENS_CEILING_EPSILON", "EvalData", "EvalError",
           "EvalSettings", "load_data", "measure_corpus", "read_reader_file", "reader_answers",
           "run_eval"]

ATTACK_TEMPLATE = "Who is the patient diagnosed with {disease}?"


class EvalError(ValueError):
    """A bad evaluation request (one line)."""


#: The reader reads the top READER_K of the retrieved texts by default (recall@k counts
#: all k; ``--reader-k``).
READER_K = 5


@dataclass
class EvalSettings:
    dataset: str = "clinic"
    n_notes: int = 2000
    n_diseases: int = 40
    seed: int = 0
    epsilons: list[float] = field(default_factory=lambda: [1.0, 3.0, 10.0])
    methods: list[str] = field(default_factory=lambda: ["non-rag", "rag", "dp-synth",
                                                        "dp-synrag"])
    runs: int = 3
    rag_k: int = 10
    # the reader reads the top reader_k of the rag_k retrieved texts
    reader_k: int = READER_K
    end_to_end: bool = True
    build_config: Path | None = None
    build_options: dict[str, Any] = field(default_factory=dict)
    dp_synth_batch: int | None = None
    n_queries: int | None = None
    query_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    query_attack: bool = True
    # what the reader is asked after the question (None: reader.json, READER_INSTRUCTIONS or
    # the default)
    instruction: str | None = None
    # the start of the reader's reply (None: reader.json's answer_prefix, else no prefix)
    answer_prefix: str | None = None
    # the paper's SearchQA rule: *_supported metrics over the queries whose answer at least
    # this many private notes hold
    min_support: int = MIN_SUPPORT

    def validate(self) -> None:
        unknown = [m for m in self.methods if m not in ALL_METHODS]
        if unknown:
            raise EvalError(f"unknown method(s) {', '.join(unknown)}; known: "
                            f"{', '.join(ALL_METHODS)}")
        if not self.epsilons or any(not (math.isfinite(e) and e > 0) for e in self.epsilons):
            raise EvalError("--epsilons must be finite positive numbers")
        if self.runs < 1 or self.rag_k < 1:
            raise EvalError("--runs and --top-k must be positive")
        if isinstance(self.reader_k, bool) or not isinstance(self.reader_k, int) \
                or self.reader_k < 1:  # more than --top-k reads all that was retrieved
            raise EvalError(f"--reader-k must be a positive integer, got {self.reader_k!r}")
        if self.instruction is not None and (not self.instruction.strip()
                                             or "\n" in self.instruction):
            raise EvalError("--instruction must be one non-empty line")
        if self.answer_prefix is not None and (not self.answer_prefix.strip()
                                               or "\n" in self.answer_prefix):
            raise EvalError("--answer-prefix must be one non-empty line")
        if isinstance(self.min_support, bool) or not isinstance(self.min_support, int) \
                or self.min_support < 0:
            raise EvalError("--min-support must be a non-negative integer")

        try:  # the build options (--config, --set) are checked before anything runs
            make_config(self.build_config, {**self.build_options, "runner": "local"})
        except ConfigError as error:
            raise EvalError(f"build options (--config/--set): {error}") from None


# ---------------------------------------------------------------------- data
#: What the reader is asked, per generated data set (the same for private RAG and for every
#: synthetic corpus); clinic and user data keep the prompt's default (the disease's name).
READER_INSTRUCTIONS = {"conditions": "Answer with the name of the condition only.",
                       "films": "Answer with the title of the film only."}
#: A set folder's reader prompt: ``{"instruction": ..., "answer_prefix": ...}``, both optional.
READER_FILE = "reader.json"
READER_KEYS = ("instruction", "answer_prefix")


def read_reader_file(root: Path) -> dict[str, str] | None:
    """A set folder's ``reader.json`` (None when the folder has none): an object with an
    optional ``instruction`` (what the reader is asked after the question) and an optional
    ``answer_prefix`` (public text the reader's reply starts with, e.g. "The answer is"),
    each one non-empty line. Any other key, or another value, is a one-line ``EvalError``."""
    path = root / READER_FILE
    if not path.is_file():
        return None
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        first = (str(error).splitlines() or [""])[0]
        raise EvalError(f"{path}: not a JSON file ({first})") from None
    if not isinstance(spec, dict):
        raise EvalError(f"{path}: expected a JSON object with {' and/or '.join(READER_KEYS)}")
    unknown = sorted(set(spec) - set(READER_KEYS))
    if unknown:
        raise EvalError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; known: "
                        f"{', '.join(READER_KEYS)}")
    for key, value in spec.items():
        if not isinstance(value, str) or not value.strip() or "\n" in value.strip():
            raise EvalError(f"{path}: {key!r} must be one non-empty line of text")
    return {key: str(value).strip() for key, value in spec.items()}


def _dataset_reader(settings: EvalSettings) -> dict[str, str] | None:
    """The reader file of a folder set (generated sets have none)."""
    if settings.dataset in ORDINARY_KINDS or settings.dataset == "clinic":
        return None
    return read_reader_file(Path(settings.dataset))


def load_data(settings: EvalSettings, work: Path) -> EvalData:
    """A generator (clinic, conditions or films; deterministic from the seed) or a user
    directory/JSONL pair. The reader's instruction: ``settings.instruction``, else the
    folder's ``reader.json``, else the set kind's (``READER_INSTRUCTIONS``) or the default;
    its answer prefix: ``settings.answer_prefix``, else ``reader.json``'s, else none."""
    data = _load_data(settings, work)
    reader = _dataset_reader(settings) or {}
    if "instruction" in reader:
        data.instruction = reader["instruction"]
    data.answer_prefix = reader.get("answer_prefix")
    if settings.instruction is not None:
        data.instruction = settings.instruction
    if settings.answer_prefix is not None:
        data.answer_prefix = settings.answer_prefix.strip()
    return data


def _load_data(settings: EvalSettings, work: Path) -> EvalData:
    if settings.dataset in ORDINARY_KINDS:  # --diseases does not apply: 40 answers each
        generated = make_ordinary_dataset(settings.dataset, n_notes=settings.n_notes,
                                          n_queries=settings.n_queries, seed=settings.seed)
        paths = save_dataset(generated, work / "data")
        answers = sorted({q.answer for q in generated.queries})
        return EvalData(
            note_ids=[n.id for n in generated.notes], notes=[n.text for n in generated.notes],
            questions=[q.question for q in generated.queries],
            answers=[q.answer for q in generated.queries],
            names=sorted({n.person for n in generated.notes}),
            attack_questions=[ATTACK_TEMPLATE.replace("{disease}", a) for a in answers],
            description={"name": settings.dataset, "notes": settings.n_notes,
                         "queries": len(generated.queries), "seed": settings.seed},
            notes_path=paths["notes"], instruction=READER_INSTRUCTIONS[settings.dataset])
    if settings.dataset == "clinic":
        dataset = make_clinic_dataset(n_notes=settings.n_notes, n_diseases=settings.n_diseases,
                                      seed=settings.seed, n_queries=settings.n_queries)
        paths = write_clinic_dataset(work / "data", n_notes=settings.n_notes,
                                     n_diseases=settings.n_diseases, seed=settings.seed,
                                     n_queries=settings.n_queries)
        diseases = sorted({q.answer for q in dataset.queries})
        return EvalData(
            note_ids=[n.id for n in dataset.notes], notes=[n.text for n in dataset.notes],
            questions=[q.question for q in dataset.queries],
            answers=[q.answer for q in dataset.queries],
            names=sorted({n.patient for n in dataset.notes}),
            attack_questions=[ATTACK_TEMPLATE.replace("{disease}", d) for d in diseases],
            description={"name": "clinic", "notes": settings.n_notes,
                         "diseases": settings.n_diseases, "queries": len(dataset.queries),
                         "seed": settings.seed},
            notes_path=paths["notes"])
    root = Path(settings.dataset)
    notes_path, queries_path = root / "notes.jsonl", root / "queries.jsonl"
    if not (notes_path.is_file() and queries_path.is_file()):
        raise EvalError(f"{root}: expected notes.jsonl and queries.jsonl (see 'dpsynrag dataset')")

    docs = read_documents(notes_path)
    items = load_qa_jsonl(queries_path)
    names = sorted({i.patient for i in items if i.patient})
    answers = sorted({i.answer for i in items})  # the attack asks about each first answer
    kind = generated_kind(root)
    data = EvalData(
        note_ids=docs.ids, notes=docs.texts, questions=[i.question for i in items],
        # one answer: the string, as before; several: all of them (any one counts)
        answers=[i.answers if i.alternatives else i.answer for i in items], names=names,
        attack_questions=[ATTACK_TEMPLATE.replace("{disease}", a) for a in answers],
        description={"name": root.name, "queries": len(items)}, notes_path=notes_path)
    if any(i.alternatives for i in items):
        data.description["queries_with_several_answers"] = sum(bool(i.alternatives)
                                                               for i in items)
    if kind is not None:
        data.instruction = READER_INSTRUCTIONS[kind]
        recipe = generation_recipe(root, kind)
        if recipe is not None:
            data.description.update(generated_by=recipe["command"],
                                    regenerated_identical=recipe["reproduced"])
    return data


def generated_kind(root: Path) -> str | None:
    """``conditions`` or ``films`` when ``root`` is a set written by ``dpsynrag dataset`` of
    that kind (its public description ``<kind>.json`` lies beside the notes), else None: the
    reader is then asked what a generated set of that kind asks."""
    kinds = [kind for kind in READER_INSTRUCTIONS if (root / f"{kind}.json").is_file()]
    return kinds[0] if len(kinds) == 1 else None


# ---------------------------------------------------------------------- one corpus
#: The reader's greedy reply: at most this many new tokens (``answer_questions``' default).
READER_TOKENS = 24


def reader_answers(llm: LLM, prompts: Sequence[str], answer_prefix: str | None) -> list[str]:
    """The reader's greedy replies to ``prompts`` (one user turn each).

    With ``answer_prefix`` (e.g. "The answer is") the reply is forced to start with it: its
    tokens (``transforms.private_prediction.response_prefix_ids``, as a build's
    ``response_prefix``) follow the chat prompt, and the model continues from there. Each
    returned reply is the CONTINUATION only, the text after the prefix, stripped: it is what
    accuracy and the leak counts score, so a word of the prefix itself never counts as an
    answer. Without a prefix this is ``models.greedy.answer_questions``.
    """
    if not answer_prefix:
        return answer_questions(llm, prompts, max_new_tokens=READER_TOKENS)
    # loads torch: imported when this runs, not with this module
    from dpsynrag.transforms.private_prediction import response_prefix_ids

    forced = response_prefix_ids(llm, answer_prefix)
    ids = [[*llm.chat_prompt_ids(str(p)), *forced] for p in prompts]
    return [reply.strip() for reply in generate_greedy(llm, ids, max_new_tokens=READER_TOKENS,
                                                       pad_multiple=16)]


def measure_corpus(texts: Sequence[str] | None, data: EvalData, models: LazyModels, *, k: int,
                   end_to_end: bool, synthetic: bool,
                   vectors: np.ndarray | None = None,
                   min_support: int = MIN_SUPPORT,
                   reader_k: int = READER_K) -> dict[str, Any]:
    """Recall@k, accuracy and leakage of answering ``data``'s questions from ``texts``,
    retrieving with ``models.embedder`` and answering with ``models.llm`` (each loaded on
    first use: a retrieval-only measure never loads the LLM). ``recall_at_k_supported`` and
    ``accuracy_supported`` are the same over the ``supported_queries`` queries whose answer
    at least ``min_support`` private notes hold (None when no query is); a synthetic corpus
    also gets ``span_share`` (``eval.metrics.span_share``)."""
    result: dict[str, Any] = {}
    supported = supported_queries(data.answer_weights(), min_support)
    result["supported_queries"] = len(supported)

    def over_supported(metric: Callable[[Sequence[Any], Sequence[Any]], float],
                       items: Sequence[Any]) -> float | None:
        if not supported:
            return None
        return metric([items[i] for i in supported], [data.answers[i] for i in supported])

    if texts is None:  # no retrieval at all
        retrieved: list[list[str]] = [[] for _ in data.questions]
        attack_ctx: list[list[str]] = [[] for _ in data.attack_questions]
        result["recall_at_k"] = None
        result["recall_at_k_supported"] = None
    else:
        index = CorpusIndex(list(texts), models.embedder, vectors=vectors)
        retrieved = index.search_texts(data.questions, k)
        attack_ctx = index.search_texts(data.attack_questions, k)
        result["recall_at_k"] = answer_recall_at_k(retrieved, data.answers)
        result["recall_at_k_weighted"] = weighted_recall_at_k(retrieved, data.answers,
                                                              data.answer_weights())
        result["recall_at_k_supported"] = over_supported(answer_recall_at_k, retrieved)
    if end_to_end:
        def prompts(questions: Sequence[str], contexts: Sequence[Sequence[str]]) -> list[str]:
            return [answer_prompt(q, c[:reader_k], instruction=data.instruction) if c
                    else no_context_prompt(q, instruction=data.instruction)
                    for q, c in zip(questions, contexts, strict=True)]

        outputs = reader_answers(models.llm, prompts(data.questions, retrieved),
                                 data.answer_prefix)
        attack = reader_answers(models.llm, prompts(data.attack_questions, attack_ctx),
                                data.answer_prefix)
        result["accuracy"] = accuracy(outputs, data.answers)
        result["accuracy_supported"] = over_supported(accuracy, outputs)
        result["leaks_benign"] = name_leaks(outputs, data.names)
        result["leaks_attack"] = name_leaks(attack, data.names)
    if synthetic and texts is not None:
        result["span_share"] = span_share(texts, data.shared_ngrams())
        result["names_in_corpus"] = names_in_corpus(texts, data.names)
        result["verbatim_spans"] = verbatim_spans(texts, data.notes, 8)
        # the spans that only one private note holds: what a corpus must never copy (a span
        # many notes share, e.g. two released list items side by side, is not one unit's)
        result["verbatim_spans_one_note"] = verbatim_spans(texts, data.notes, 8,
                                                           max_private_frequency=1)
        # the same within the spans an n-gram note writes between its " … " junctions (what
        # the note asserts was written as one run; two spans side by side across a junction
        # can match one note's list by the order alone)
        pieces = [piece for text in texts for piece in text.split(SPAN_SEPARATOR)]
        result["verbatim_spans_one_note_in_spans"] = verbatim_spans(
            pieces, data.notes, 8, max_private_frequency=1)
        result["corpus_size"] = len(texts)
    return result


# ---------------------------------------------------------------------- methods
def _build_config(settings: EvalSettings, method: str, epsilon: float, run: int) -> BuildConfig:
    """The build options at ``epsilon`` with the same stage shares as the reference config.

    The config (file and ``--set``) is read as the plan at its own epsilon (default 10); at
    another epsilon rho_hist and rho_mean scale with the total rho and eps_theta with its
    square root (its cost is eps_theta^2 / 8), so every stage keeps its share of the budget
    and prediction gets the rest, as in the reference plan.
    """
    options = dict(settings.build_options)
    options["generate"] = "facts" if method in ("dp-synrag-facts", "dp-synrag-writer") \
        else "tokens"
    if method in ("dp-synrag-facts", "dp-synrag-writer"):  # one config serves both methods
        options["writer"] = "tokens" if method == "dp-synrag-writer" else "template"
    reference = make_config(settings.build_config, {**options, "runner": "local"})
    conversion = Conversion(reference.conversion)
    ratio = (rho_for(epsilon, reference.delta, conversion)
             / rho_for(reference.epsilon, reference.delta, conversion))
    if epsilon > MAX_EPSILON:  # the noise-free ceilings: measurement builds
        options["allow_large_epsilon"] = True
    options.update({"epsilon": epsilon, "runner": "local",
                    # facts without --rho-hist: a share of the total already (None stays)
                    "rho_hist": None if reference.rho_hist is None
                    and options["generate"] == "facts" else reference.tokens_rho_hist * ratio,
                    "rho_mean": reference.rho_mean * ratio,
                    "eps_theta": reference.eps_theta * math.sqrt(ratio)})
    if method == "dp-synrag-hard":
        options["L"] = 1
    if method == "dp-synrag-no-filter":
        options["no_filter"] = True
    if method == "dp-synrag-no-retrieval":
        options["no_retrieval"] = True
    return make_config(settings.build_config, options)


def _run_dp_synrag(settings: EvalSettings, data: EvalData, runner: Runner, models: LazyModels,
                   work: Path, method: str, epsilon: float, run: int) -> dict[str, Any]:
    import pyarrow.parquet as pq

    # loads torch: imported when this runs, not with this module
    from dpsynrag.pipeline.build import make_plan, run_build

    config = _build_config(settings, method, epsilon, run)
    name = f"{method}-eps{epsilon:g}-run{run}"
    out = work / "builds" / name
    # each run is its own what-if release: its own corpus ledger (a shared one would compose
    # every run of the evaluation and stop at the first build's default lifetime cap)
    summary = run_build(data.notes_path, out, config, state_dir=work / "state" / name,
                        force=True, runner=runner,
                        corpus_ledger=work / "ledgers" / f"{name}.sqlite")
    table = pq.read_table(out / CORPUS_FILE).to_pylist()
    texts = [row["text"] for row in table if row["kept"]]
    result = measure_corpus(texts, data, models, k=settings.rag_k,
                            end_to_end=settings.end_to_end, synthetic=True,
                            min_support=settings.min_support,
                            reader_k=settings.reader_k)
    plan = make_plan(config)
    stage_rho = {"histogram": plan.rho_hist, "phrases": plan.rho_A, "cluster_facts": plan.rho_C,
                 **({"roles": plan.rho_R} if plan.share_roles else {}),
                 **({"writer": plan.rho_tokens} if config.facts_writer_tokens else {})} \
        if config.generate == "facts" else \
        {"histogram": plan.rho_hist, "retrieval": config.L * plan.rho_retrieval,
         "prediction": config.L * plan.rho_prediction}
    result.update({
        "rho": summary.rho_spent, "epsilon_spent": summary.epsilon,
        "stage_rho": stage_rho,
        "kept": summary.kept_texts, "build_seconds": summary.stage_seconds})
    return result


def _facts_ceiling_texts(settings: EvalSettings, data: EvalData,
                         models: LazyModels) -> list[str]:
    """The facts generator at epsilon = infinity: exact counts, the phrases (or terms) held by
    at least tau_A units of the reference plan (epsilon 10) as anchors, each term's most
    frequent role (exact), the same clustering, selection (at a negligible sigma) and writer.
    The n-gram mode (``facts_items = "ngrams"``) runs the build's own stage function
    (``_ngram_ceiling_texts``). NOT private."""
    from collections import Counter

    # loads torch: imported when this runs, not with this module
    from dpsynrag.pipeline.build import make_plan

    config = _build_config(settings, "dp-synrag-facts", 10.0, 0)
    plan = make_plan(config)
    if config.facts_items == "ngrams":
        return _ngram_ceiling_texts(data.notes, plan, config, models)
    vocab = public_vocabulary()
    keywords = fact_keywords(data.notes, vocab, plan.K_s)
    roles: dict[str, str] | None = None
    candidates = None
    anchoring: list[list[str]] | None = None  # the terms that choose a note's cluster
    if config.facts_items == "terms":
        candidates = document_terms(data.notes, vocab, CANDIDATES)
        phrases = [list(first_terms(t, plan.K_e).terms) for t in candidates]
    else:
        phrases = document_phrases(data.notes, vocab, plan.K_e)
    phrase_count = Counter(p for items in phrases for p in set(items))
    tau = plan.tau_A
    anchors = {p: c for p, c in phrase_count.items() if c >= tau}
    if candidates is not None:  # as the build: choose again among the anchors, then by role
        terms = released_choices(candidates, anchors, plan.K_e)
        pairs = Counter((term, role) for t in terms
                        for term, role in zip(t.terms, t.roles, strict=True) if role)
        roles = {}
        for (term, role), _ in sorted(pairs.items(), key=lambda item: -item[1]):
            roles.setdefault(term, role)  # the most frequent role of each term (exact)
        chosen = released_choices(candidates, anchors, plan.K_e, roles)
        phrases = [list(t.terms) for t in chosen]
        anchoring = [anchor_terms(t, roles) for t in chosen]
    keyword_count = Counter(w for items in keywords for w in set(items))
    top = [w for w, _ in keyword_count.most_common(config.R_f)]
    domain = fact_domain(anchors, top)
    in_domain = set(domain)
    items = [[x for x in dict.fromkeys([*p, *k]) if x in in_domain]
             for p, k in zip(phrases, keywords, strict=True)]
    priority = role_priority({t: r for t, r in roles.items() if t in anchors}, anchors) \
        if roles else None
    # as the build: a document's own terms choose its cluster, not its keywords
    order, clusters = anchor_clusters(anchoring if anchoring is not None else phrases,
                                      anchors, config.L, priority=priority,
                                      own_order=OWN_ORDER_PRIORITIES)
    exact = fact_counts(clusters, items, domain, plan.K_e + plan.K_s)
    n = max(len(data.notes), 1)
    shares = {w: keyword_count[w] / n for w in top}
    facts = select_facts(exact, domain, order, set(anchors), 1e-3,
                         FactRule(label=config.facts_label), keyword_share=shares,
                         phrase_share={p: c / n for p, c in anchors.items()} if roles is not None
                         else None, roles=roles, anchor_counts=anchors)
    return write_notes(facts)


def _ngram_ceiling_texts(texts: Sequence[str], plan: Any, config: BuildConfig,
                         models: LazyModels) -> list[str]:
    """The n-gram mode at epsilon = infinity: ``facts.span_corpus.span_corpus``, the very
    function a build runs (``pipeline.ngram_stages``), with exact releases
    (``facts.span_releases.ExactReleases``): each level keeps the n-grams that at least its
    planned threshold tau_j of units chose (``plan`` is the reference plan at epsilon 10), the
    span histograms are exact. NOT private."""
    from dpsynrag.facts.ngrams import level_keys
    from dpsynrag.facts.span_corpus import span_corpus
    from dpsynrag.facts.span_releases import ExactReleases, SpanReleases
    from dpsynrag.pipeline.ngram_stages import ngram_settings
    from dpsynrag.transforms.vocabulary import stopwords

    exact = ExactReleases(dict(zip(level_keys(plan.ngram_lengths), plan.ngram_thresholds,
                                   strict=True)),
                          weight_scale=plan.ngram_weight_scale or None,
                          span_weight_scale=plan.span_weight_scale or None)
    # SpanReleases declares sigma_clusters as a plain (settable) attribute, the frozen
    # dataclass has it read-only: the same source, typed as the protocol it implements
    releases = cast("SpanReleases", exact)
    corpus = span_corpus(list(texts), ngram_settings(plan, config.L, config.ngram_anchors),
                         releases, stop=stopwords(),
                         embed=lambda batch: models.embedder.encode(list(batch)))
    return [note.text for note in corpus.notes]


def _run_dp_synth(settings: EvalSettings, data: EvalData, runner: Runner, models: LazyModels,
                  work: Path, epsilon: float, run: int) -> dict[str, Any]:
    # loads torch: imported when this runs, not with this module
    from dpsynrag.eval.dp_synth import plan_dp_synth, run_dp_synth
    from dpsynrag.pipeline.build import DEFAULT_REPHRASE_PROMPT

    config = _build_config(settings, "dp-synth", epsilon, run)
    plan = plan_dp_synth(epsilon, config.delta, config.conversion, config.T, config.clip)
    batch = settings.dp_synth_batch or config.k
    n_batches = max(1, config.R)  # public: the same number of texts as DP-SynRAG's clusters
    state = work / "state" / f"dp-synth-eps{epsilon:g}-run{run}"
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    cached = state / "texts.json"
    if cached.exists():
        texts = json.loads(cached.read_text())
    else:
        ledger = Ledger(state / "ledger.sqlite")
        try:
            texts = run_dp_synth(
                data.notes, runner, ledger, plan=plan, batch_size=batch, T=config.T,
                prompt=config.rephrase_prompt or DEFAULT_REPHRASE_PROMPT, eos_ids=None,
                n_batches=n_batches, response_prefix=config.response_prefix or "")
        finally:
            ledger.close()
        cached.write_text(json.dumps(texts))
    result = measure_corpus(texts, data, models, k=settings.rag_k,
                            end_to_end=settings.end_to_end, synthetic=True,
                            min_support=settings.min_support,
                            reader_k=settings.reader_k)
    result.update({"rho": plan.rho_total,
                   "stage_rho": {"histogram": 0.0, "retrieval": 0.0,
                                 "prediction": plan.rho_total}})
    return result


#: The settings a finished run's result depends on (``--methods``, ``--epsilons`` and
#: ``--runs`` may grow between reruns: each run is stored under its own name).
RUN_SETTINGS = ("dataset", "n_notes", "n_diseases", "seed", "rag_k", "reader_k",
                "end_to_end",
                "build_config", "build_options", "dp_synth_batch", "n_queries", "query_options",
                "query_attack", "instruction", "answer_prefix", "min_support", "reader")
SETTINGS_FILE = "run-settings.json"


def _public_settings(settings: EvalSettings) -> dict[str, Any]:
    """The settings as the report writes them (paths as strings)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(settings).items()}


def _check_resumable(settings: EvalSettings, report_dir: Path) -> None:
    """Refuse a rerun into ``report_dir`` whose stored runs were made with other settings
    (they would be mixed with new ones in one table); record the settings on a first run."""
    public = {**_public_settings(settings), "reader": _dataset_reader(settings)}
    current = json.loads(json.dumps({name: public[name] for name in RUN_SETTINGS}))  # as stored
    # a settings file from before a setting existed ran with its default
    defaults = json.loads(json.dumps({**_public_settings(EvalSettings()), "reader": None}))
    path = report_dir / SETTINGS_FILE
    if path.exists():
        stored = json.loads(path.read_text())
        changed = sorted(name for name in RUN_SETTINGS
                         if stored.get(name, defaults[name]) != current[name])
        if changed:
            raise EvalError(f"{report_dir}: its runs were made with other settings "
                            f"({', '.join(changed)}); use another -o, or remove the directory")
        return
    if any((report_dir / "runs").iterdir()):
        return  # a report from before this check: nothing to compare with
    path.write_text(json.dumps(current, indent=1, sort_keys=True))


def run_eval(settings: EvalSettings, report_dir: Path, *, models: LazyModels | None = None,
             runner: Runner | None = None,
             progress: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Run every requested method; write results.json, results.md and the plots.

    ``models`` are the LLM and the embedder every method answers and retrieves with (by
    default the build options' ``model`` and ``embedder``, loaded on first use); the builds
    run on ``runner``, by default a local one over the same ``models``. A given ``runner``
    must hold the same models (the evaluation compares methods on one model and embedder).
    """
    settings.validate()
    report_dir.mkdir(parents=True, exist_ok=True)
    work = report_dir / "work"
    (report_dir / "runs").mkdir(exist_ok=True)
    _check_resumable(settings, report_dir)
    code = code_provenance()  # which package this process imported (eval.provenance)
    data = load_data(settings, work)
    if models is None:
        models = LazyModels(settings.build_options.get("model"),
                            settings.build_options.get("embedder"))
    if runner is None:
        runner = LocalRunner(models=models)
    note_vectors = None
    entries: list[dict[str, Any]] = []
    for method in settings.methods:
        private = method in PRIVATE_METHODS
        epsilons: list[float | None] = list(settings.epsilons) if private else [None]
        runs = settings.runs if private else 1
        for epsilon in epsilons:
            runs_done: list[dict[str, Any]] = []
            entry: dict[str, Any] = {"method": method, "epsilon": epsilon, "runs": runs_done}
            for run in range(runs):
                label = f"{method}-eps{'inf' if epsilon is None else f'{epsilon:g}'}-run{run}"
                path = report_dir / "runs" / f"{label}.json"
                if path.exists():
                    entry["runs"].append(json.loads(path.read_text()))
                    continue
                progress(f"{label}: running")
                started = time.monotonic()
                if method == "non-rag":
                    result = measure_corpus(None, data, models, k=settings.rag_k,
                                            end_to_end=settings.end_to_end, synthetic=False,
                                            min_support=settings.min_support,
                                            reader_k=settings.reader_k)
                elif method == "facts-ceiling":
                    ceiling = _facts_ceiling_texts(settings, data, models)
                    result = measure_corpus(ceiling, data, models, k=settings.rag_k,
                                            end_to_end=settings.end_to_end, synthetic=True,
                                            min_support=settings.min_support,
                                            reader_k=settings.reader_k)
                elif method == "tokens-ceiling":
                    result = _run_dp_synrag(settings, data, runner, models, work, "dp-synrag",
                                            TOKENS_CEILING_EPSILON, 0)
                    result["ceiling_epsilon"] = TOKENS_CEILING_EPSILON
                elif method == "rag":
                    if note_vectors is None:
                        note_vectors = models.embedder.encode(list(data.notes))
                    result = measure_corpus(data.notes, data, models, k=settings.rag_k,
                                            end_to_end=settings.end_to_end, synthetic=False,
                                            vectors=note_vectors,
                                            min_support=settings.min_support,
                                            reader_k=settings.reader_k)
                elif method == "dp-synth":
                    assert epsilon is not None
                    result = _run_dp_synth(settings, data, runner, models, work, epsilon, run)
                elif method in QUERY_METHODS:
                    assert epsilon is not None
                    if note_vectors is None:
                        note_vectors = models.embedder.encode(list(data.notes))
                    result = run_query_method(data, models, work, method, epsilon, run,
                                              note_vectors, settings.query_options.get(method),
                                              attack=settings.query_attack)
                else:
                    assert epsilon is not None
                    result = _run_dp_synrag(settings, data, runner, models, work, method,
                                            epsilon, run)
                result["wall_seconds"] = time.monotonic() - started
                result["code"] = code
                path.write_text(json.dumps(result, indent=1, sort_keys=True))
                entry["runs"].append(result)
                progress(f"{label}: done in {result['wall_seconds']:.0f} s")
            entries.append(entry)
    results = {"dataset": data.description, "settings": _public_settings(settings),
               "methods": entries}
    (report_dir / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    write_markdown(results, report_dir / "results.md")
    write_plots(results, report_dir)
    return results
