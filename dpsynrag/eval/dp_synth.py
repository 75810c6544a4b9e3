"""DP-Synth: the paper's private-prediction baseline without clustering or retrieval.

In the style of Amin et al. (2024), "Private prediction for large-scale synthetic text
generation": the private documents are split into disjoint batches; each batch writes one
synthetic text by private prediction -- at every step the clipped next-token logits of all
its documents (each rephrased with the same public prompt) are summed and one token is drawn
from exactly softmax(z / tau). DP-SynRAG (Mori et al.) compares against it at the same
(epsilon, delta); it has no keyword histogram and no retrieval, so the whole budget goes to
prediction.

Privacy (add/remove one document, the project's neighbouring relation):

* One batch, one step: every document's clipped row lies in [-c, c], so one draw is the
  exponential mechanism with sensitivity c (bounded range 2c): rho_tok = (c / tau)^2 / 2.
* One batch: at most T adaptive draws, rho_batch = T (c / tau)^2 / 2 (sequential
  composition). A batch whose text ends early is charged the unused draws as a reservation,
  so its cost never depends on the data.
* All batches: each document is in exactly one batch, and the assignment of documents to
  batches is drawn independently of the data (see :func:`random_assignment` for why it must
  be an *independent* assignment under add/remove) -> parallel composition with overlap 1:
  rho_total = rho_batch. Hence ``c / tau = sqrt(2 rho_total / T)``.
* (epsilon, delta) from rho_total by the named conversion (``conversions.epsilon_for``).

The number of batches is a public parameter (``n_batches``). Deriving it from the data size
(``ceil(n / batch_size)``, the default) publishes ``ceil(n / batch_size)``, which an exact
add/remove guarantee does not cover; pass ``n_batches`` from public information when that
matters (the benchmark's corpus sizes are public, so the evaluation may use the default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from dpsynrag.accounting.conversions import (
    CONVERSION_REFERENCES,
    Conversion,
    epsilon_for,
    rho_for,
)
from dpsynrag.accounting.ledger import Ledger
from dpsynrag.accounting.planner import DEFAULT_VOCAB_SIZE, PlanError, consensus_rows
from dpsynrag.accounting.rng import RandomSource, secure_rng
from dpsynrag.pipeline.runners import Runner
from dpsynrag.prompts.templates import PLACEHOLDER
from dpsynrag.transforms.prediction_release import PartitionTokenSampler

__all__ = [
    "GROUP",
    "STAGE",
    "DPSynthPlan",
    "PartitionTokenSampler",
    "check_batches",
    "partition_name",
    "plan_dp_synth",
    "random_assignment",
    "random_batches",
    "run_dp_synth",
]

STAGE = "dp-synth-prediction"
GROUP = "dp-synth"


# ---------------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class DPSynthPlan:
    """A solved DP-Synth budget. All fields are public parameters.

    ``rho_per_batch == rho_total``: batches are disjoint (parallel composition, overlap 1).
    """

    epsilon: float
    delta: float
    conversion: str
    conversion_reference: str
    T: int
    clip: float
    rho_total: float
    rho_per_batch: float
    rho_per_token: float
    c_over_tau: float
    temperature: float
    epsilon_per_token: float
    epsilon_bun_steinke: float
    epsilon_cks: float
    vocab_size: int
    consensus_rows: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def plan_dp_synth(
    epsilon: float,
    delta: float,
    conversion: Conversion | str,
    T: int,
    clip: float = 0.5,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
) -> DPSynthPlan:
    """The DP-Synth plan for a target (epsilon, delta): everything goes to prediction.

    rho_total = rho_for(epsilon, delta, conversion); rho_batch = rho_total (disjoint batches);
    rho_tok = rho_total / T; c / tau = sqrt(2 rho_tok) = sqrt(2 rho_total / T);
    temperature tau = clip / (c / tau); per-token epsilon (EM) = 2 c / tau.
    """
    if not (isinstance(T, int) and T >= 1):
        raise PlanError(f"T must be a positive integer, got {T!r}")
    for name, value in (("epsilon", epsilon), ("clip", clip)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise PlanError(f"{name} must be a finite positive number, got {value!r}")
    if not (0 < delta < 1):
        raise PlanError(f"delta must lie strictly between 0 and 1, got {delta!r}")
    if not (isinstance(vocab_size, int) and vocab_size >= 2):
        raise PlanError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
    conversion = Conversion(conversion)
    rho_total = rho_for(epsilon, delta, conversion)
    rho_per_token = rho_total / T
    c_over_tau = math.sqrt(2.0 * rho_total / T)
    return DPSynthPlan(
        epsilon=float(epsilon),
        delta=float(delta),
        conversion=conversion.value,
        conversion_reference=CONVERSION_REFERENCES[conversion],
        T=T,
        clip=float(clip),
        rho_total=rho_total,
        rho_per_batch=rho_total,
        rho_per_token=rho_per_token,
        c_over_tau=c_over_tau,
        temperature=float(clip) / c_over_tau,
        epsilon_per_token=2.0 * c_over_tau,
        epsilon_bun_steinke=epsilon_for(rho_total, delta, Conversion.BUN_STEINKE),
        epsilon_cks=epsilon_for(rho_total, delta, Conversion.CKS),
        vocab_size=vocab_size,
        consensus_rows=consensus_rows(c_over_tau, vocab_size),
    )


# ---------------------------------------------------------------------------------- batching
def _check_counts(n_docs: int, size: int, name: str) -> None:
    if not (isinstance(n_docs, int) and n_docs >= 0):
        raise ValueError(f"n_docs must be a non-negative integer, got {n_docs!r}")
    if not (isinstance(size, int) and size >= 1):
        raise ValueError(f"{name} must be a positive integer, got {size!r}")


def random_batches(
    n_docs: int, batch_size: int, rng: RandomSource | None = None
) -> list[list[int]]:
    """A uniformly random partition of ``range(n_docs)`` into consecutive chunks of a shuffle:
    ``ceil(n_docs / batch_size)`` batches of ``batch_size`` (the last one smaller).

    The shuffle is Fisher-Yates on ``rng.integers`` (exactly uniform, CSPRNG-backed; a fresh
    ``secure_rng()`` when ``rng`` is None). Each batch is returned in ascending index order.

    Privacy: the partition depends only on ``n_docs`` and the random source, never on document
    content. That is enough for parallel composition under *substitution* (replace-one)
    neighbours: the same positions form the same batches, and the changed document is in one
    of them. It is **not** enough under the project's *add/remove* relation: adding a
    document shifts every later position of the shuffled order, and no coupling of the two
    shuffles changes exactly one batch by one member (the batch sizes are fixed, so the added
    document would have to land in the short last batch, which it does only with probability
    (n mod b + 1)/(n + 1)). The best simple coupling (swap the added document with the last
    element) changes two batches, one of them by a substitution (bounded range 4c instead of
    2c, so 4x the rho) and the other by a removal: it only bounds the cost by 5x the
    per-batch rho, not 1x. :func:`run_dp_synth` therefore uses
    :func:`random_assignment`; this function is kept for fixed-size batching experiments
    under substitution neighbours and for tests.
    """
    _check_counts(n_docs, batch_size, "batch_size")
    rng = secure_rng() if rng is None else rng
    order = list(range(n_docs))
    for i in range(n_docs - 1, 0, -1):  # Fisher-Yates: order[i] <- uniform of order[0..i]
        j = rng.integers(i + 1)
        order[i], order[j] = order[j], order[i]
    return [sorted(order[start:start + batch_size]) for start in range(0, n_docs, batch_size)]


def random_assignment(
    n_docs: int, n_batches: int, rng: RandomSource | None = None
) -> list[list[int]]:
    """Assign every document independently and uniformly to one of ``n_batches`` batches.

    Batch sizes are Multinomial(n_docs; 1/n_batches, ...), about ``n_docs / n_batches`` each;
    a batch may be empty (it is still sampled from the zero vote, i.e. uniformly, and charged).
    Draws use ``rng.integers`` (exactly uniform, CSPRNG-backed; a fresh ``secure_rng()`` when
    ``rng`` is None). Each batch is returned in ascending index order.

    Privacy (add/remove one document x, ``n_batches`` public): let a be the assignment of the
    documents of D and a_x the independent draw for x, so (a, a_x) is the assignment for
    D' = D + x with exactly the same law as a fresh one. For every fixed (a, a_x) the batches
    of D and D' are identical except batch a_x, which gains x; the mechanism run on every
    batch is rho_batch-zCDP, so the two output laws are within rho_batch (the other batches
    have identical inputs, hence identical output laws: the products differ in one factor). The
    full outputs are mixtures over (a, a_x) with the same weights, and Renyi divergence is
    jointly quasi-convex (van Erven & Harremoes 2014, Thm 13), so D_alpha of the mixtures is
    at most the supremum over (a, a_x): rho_batch-zCDP overall (parallel composition, overlap
    1). The assignment itself must not be published together with document identities.
    """
    _check_counts(n_docs, n_batches, "n_batches")
    rng = secure_rng() if rng is None else rng
    batches: list[list[int]] = [[] for _ in range(n_batches)]
    for doc in range(n_docs):
        batches[rng.integers(n_batches)].append(doc)
    return batches


def check_batches(batches: Sequence[Sequence[int]], n_docs: int) -> None:
    """Check that ``batches`` are disjoint and use only indices of ``range(n_docs)``.

    Documents left out of every batch are allowed (they simply spend nothing); a document in
    two batches would break the overlap-1 accounting and is refused.
    """
    seen: set[int] = set()
    for batch in batches:
        for doc in batch:
            if not (isinstance(doc, int | np.integer) and 0 <= int(doc) < n_docs):
                raise ValueError(f"batch index {doc!r} is outside range({n_docs})")
            if int(doc) in seen:
                raise ValueError("a document appears in two batches; DP-Synth accounting "
                                 "needs disjoint batches (overlap 1)")
            seen.add(int(doc))


# ---------------------------------------------------------------------------------- sampling
def partition_name(batch: int) -> str:
    return f"{GROUP}/batch/{batch:05d}"


# ---------------------------------------------------------------------------------- the run
def run_dp_synth(
    texts: Sequence[str],
    runner: Runner,
    ledger: Ledger,
    *,
    plan: DPSynthPlan,
    batch_size: int,
    T: int,
    prompt: str,
    eos_ids: Iterable[int] | None,
    batch_rows: int | None = None,
    progress: Callable[[int], None] | None = None,
    n_batches: int | None = None,
    batches: Sequence[Sequence[int]] | None = None,
    response_prefix: str = "",
) -> list[str]:
    """Run DP-Synth on ``texts``: one synthetic text per batch, every token charged.

    * Declares parallel group ``dp-synth`` (max_overlap 1) on ``ledger``.
    * Batches: ``batches`` if given (disjoint, drawn independently of the data -- e.g. stored
      from an earlier, crashed run so that a resume regenerates the same texts), else
      :func:`random_assignment` of the documents to ``n_batches`` batches with the ledger's
      random source; ``n_batches`` defaults to ``ceil(len(texts) / batch_size)`` (which
      publishes that number; see the module docstring).
    * Each batch's documents are rephrased with ``prompt`` (holds ``{document}`` once) and
      decoded for up to ``T`` tokens at temperature ``plan.temperature`` with clip
      ``plan.clip``; ``eos_ids`` end a text early. Pass None (the runner's model's EOS set,
      which is what the engine stops on) unless you pass exactly that set.
    * ``progress(1)`` is called as each batch finishes.

    Privacy cost: every batch is charged exactly ``T (c/tau)^2 / 2 = plan.rho_total``
    (reservation when EOS comes early, the remaining draws for any batch that did not finish
    through the sampler); batches are disjoint, so the group costs ``plan.rho_total`` and
    ``ledger.total_rho()`` grows by exactly that.
    """
    if T != plan.T:
        raise ValueError(f"T={T} differs from the plan's T={plan.T}")
    if prompt.count(PLACEHOLDER) != 1:
        raise ValueError("the prompt must contain the placeholder {document} exactly once")
    n_docs = len(texts)
    if batches is None:
        _check_counts(n_docs, batch_size, "batch_size")
        if n_batches is None:
            n_batches = max(1, math.ceil(n_docs / batch_size))
        batches = random_assignment(n_docs, n_batches, ledger.rng)
    else:
        check_batches(batches, n_docs)
    if eos_ids is None:
        eos_ids = runner.llm_identity().get("eos_token_ids", [])
    ledger.declare_parallel_group(
        GROUP, 1, "DP-Synth: disjoint random batches of documents, one synthetic text each")
    groups = [[texts[int(i)] for i in batch] for batch in batches]

    def finished(_group: int, _n_tokens: int) -> None:
        if progress is not None:
            progress(1)

    sampler = PartitionTokenSampler(
        ledger, [partition_name(b) for b in range(len(groups))], group=GROUP, stage=STAGE,
        clip=plan.clip, temperature=plan.temperature, max_new_tokens=T, eos_ids=eos_ids,
        on_finish=finished)
    out = runner.predict(groups, sampler, prompt=prompt, max_new_tokens=T, clip=plan.clip,
                         temperature=plan.temperature, batch_rows=batch_rows,
                         response_prefix=response_prefix)
    sampler.charge_unfinished()
    return list(out)
