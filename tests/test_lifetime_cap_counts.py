"""How many identical builds the default lifetime cap admits, as docs/operations.md states it.

The cap a corpus ledger gets with its first build charge is 2 epsilon at that build's delta.
Builds compose in rho (zCDP), so n builds cost less than n epsilon and the count depends on
epsilon: two at epsilon 10 but three at epsilon 1 and 3. Each count here comes from the real
path (``make_plan``, ``charge_corpus_ledger`` on a fresh ``BuildState`` per build, the corpus
ledger's refusal), and the documentation's sentence is checked against the same numbers, so a
change of the planner, the cap or the conversion fails here until the docs are updated.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpsynrag.accounting.corpus_ledger import BudgetRefusedError, CorpusLedger
from dpsynrag.pipeline.build import DEFAULT_LIFETIME_FACTOR, charge_corpus_ledger, make_plan
from dpsynrag.pipeline.config import BuildConfig
from dpsynrag.pipeline.defaults import DEFAULT_DELTA
from dpsynrag.pipeline.state import BuildState

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def _identical_builds(tmp_path: Path, epsilon: float, generate: str
                      ) -> tuple[int, list[float], float | None]:
    """(builds accepted, lifetime epsilon after each, epsilon the refused one would reach)."""
    config = BuildConfig(epsilon=epsilon, generate=generate)
    plan = make_plan(config)
    ledger = tmp_path / "corpus.sqlite"
    spent: list[float] = []
    for n in range(6):
        state = BuildState(tmp_path / f"state{n}", config.fingerprint(), tmp_path / f"out{n}")
        try:
            charge_corpus_ledger(tmp_path / "notes.jsonl", config, plan, state, ledger)
        except BudgetRefusedError:
            with CorpusLedger(ledger) as corpus:
                [refusal] = corpus.refusals()
                cap = corpus.cap
            assert cap is not None
            assert cap.epsilon == DEFAULT_LIFETIME_FACTOR * epsilon == 2 * epsilon
            assert cap.delta == DEFAULT_DELTA
            return n, spent, refusal.epsilon_would_be
        finally:
            state.close()
        with CorpusLedger(ledger) as corpus:
            epsilon_spent = corpus.spent().epsilon
        assert epsilon_spent is not None
        spent.append(epsilon_spent)
    raise AssertionError("six identical builds fit a cap of twice one build's epsilon")


@pytest.mark.parametrize(("generate", "epsilon", "builds", "after", "third"), [
    ("facts", 10.0, 2, "16", "21.3"),
    ("facts", 3.0, 3, "5.99", None),
    ("facts", 1.0, 3, "1.95", None),
    ("facts", 0.05, 2, None, None),  # the phrase deltas tip the third build over
    ("tokens", 10.0, 2, None, None),
    ("tokens", 3.0, 3, None, None),
])
def test_the_default_cap_admits_the_documented_number_of_builds(
        tmp_path: Path, generate: str, epsilon: float, builds: int, after: str | None,
        third: str | None) -> None:
    accepted, spent, would_be = _identical_builds(tmp_path, epsilon, generate)
    assert accepted == builds
    assert all(value <= 2 * epsilon for value in spent)
    assert spent[0] < spent[-1]  # each build is charged: the lifetime spend grows
    if after is not None:  # the spend the docs print after the last build that fits
        assert f"{spent[-1]:.3g}" == after
    assert would_be is not None and would_be > 2 * epsilon
    if third is not None:
        assert f"{would_be:.3g}" == third


def test_the_operations_guide_states_these_counts() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split("## The corpus ledger and its lifetime cap", 1)[1].split("\n## ", 1)[0]
    flat = re.sub(r"\s+", " ", section)
    assert "ε_cap = 2ε at that build's δ" in flat
    assert "**two at ε = 10** (they spend 16.0 of 20; a third would reach 21.3)" in flat
    assert "**three at ε = 1 and at ε = 3** (1.95 of 2, 5.99 of 6)" in flat
    assert "same counts at ε = 3 and 10" in flat and "such as 0.05" in flat
    assert "a third build is refused" not in flat  # the old, wrong rule
