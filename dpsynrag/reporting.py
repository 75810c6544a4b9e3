"""Human-readable reports (rich tables) of public quantities: plans and ledgers."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from dpsynrag.accounting.planner import BudgetPlan, FactsBudgetPlan


def print_budget_plan(plan: BudgetPlan, console: Console | None = None) -> None:
    """Print where the budget goes, stage by stage, and the derived noise scales."""
    console = console or Console()
    table = Table(title=(f"DP-SynRAG budget: epsilon={plan.epsilon:g}, delta={plan.delta:g} "
                         f"({plan.conversion}) -> rho={plan.rho_total:.4f}"))
    table.add_column("stage")
    table.add_column("mechanism")
    table.add_column("ρ/cluster", justify="right")
    table.add_column("ρ total", justify="right")
    table.add_column("share", justify="right")
    for stage, mechanism, per_cluster, composed in plan.stage_rows():
        table.add_row(stage, mechanism, "-" if math.isnan(per_cluster) else f"{per_cluster:.5f}",
                      f"{composed:.5f}", f"{composed / plan.rho_total:.1%}")
    table.add_row("total", f"clusters × L={plan.L}", "", f"{plan.rho_total:.5f}",
                  "100.0%", style="bold")
    console.print(table)
    console.print(
        f"sigma_h = {plan.sigma_h:.4f}   sigma_mu = {plan.sigma_mu:.4f}   "
        f"c/tau = {plan.c_over_tau:.4f} (per-token epsilon {plan.epsilon_per_token:.4f}, "
        f"rho {plan.rho_per_token:.6f})")
    console.print(
        f"epsilon of rho={plan.rho_total:.4f} at delta={plan.delta:g}: "
        f"Bun-Steinke {plan.epsilon_bun_steinke:.4f}, CKS {plan.epsilon_cks:.4f} "
        f"(this plan: {plan.conversion}, {plan.conversion_reference})")
    console.print(
        f"consensus: a token wins only when about {plan.consensus_rows} rows of a cluster agree "
        f"(ln(|V|-1) / (2 c/tau), |V|={plan.vocab_size}); choose k so retrieved clusters reach it")


def print_facts_plan(p: FactsBudgetPlan, console: Console | None = None) -> None:
    """The facts plan as a table of where rho goes, then its noise scales and epsilons."""
    console = console or Console()
    table = Table(title=(f"DP-SynRAG facts budget: epsilon={p.epsilon:g}, delta={p.delta:g} "
                         f"(delta_phrases={p.delta_phrases:g}, {p.conversion}) -> "
                         f"rho={p.rho_total:.4f}"))
    for column, justify in (("stage", "left"), ("mechanism", "left"),
                            ("ρ/cluster", "right"), ("ρ total", "right"), ("share", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for stage, mechanism, per_cluster, composed in p.stage_rows():
        table.add_row(stage, mechanism, "-" if math.isnan(per_cluster) else f"{per_cluster:.5f}",
                      f"{composed:.5f}", f"{composed / p.rho_total:.1%}")
    table.add_row("total", f"clusters × L={p.L}", "", f"{p.rho_total:.5f}", "100.0%",
                  style="bold")
    console.print(table)
    if p.ngram_lengths:
        levels = ", ".join(f"{n}-grams K {k} tau {t}" for n, k, t in
                           zip(p.ngram_lengths, p.ngram_items, p.ngram_thresholds,
                               strict=True))
        console.print(f"sigma_A = {p.sigma_A:.4f} (every level)   sigma_C = {p.sigma_C:.4f}")
        if p.ngram_weight_scale:  # weighted: tau is in weight units W / sqrt(m) per document
            w = p.ngram_weight_scale
            few = max(math.ceil(t / w) for t in p.ngram_thresholds)
            many = p.docs_to_release
            who = (f"tau counts weights (W = {w}, each of a document's m n-grams weighs "
                   f"W/sqrt(m)): an n-gram is released once about {few} documents offering "
                   f"only it, or {many} offering their full cap, write it")
        else:
            who = "an n-gram is released once about tau documents offer it"
        console.print(
            f"n-gram levels: {levels}; {who}; one document's own n-grams appear with "
            f"probability <= delta_A = {p.delta_A:.3g} (planned delta_phrases "
            f"{p.delta_phrases:g})")
    else:
        console.print(
            f"sigma_h = {p.sigma_h:.4f}   sigma_A = {p.sigma_A:.4f}   tau_A = {p.tau_A}   "
            f"sigma_C = {p.sigma_C:.4f}")
        console.print(
            f"phrases: a phrase is released once about {p.docs_to_release} documents share "
            f"it (probability about 1/2 at tau_A); one document's own phrases appear with "
            f"probability <= delta_A = {p.delta_A:.3g} (planned delta_phrases "
            f"{p.delta_phrases:g})")
    if p.writer == "tokens":
        console.print(
            f"token writer: {p.T} draws per kept cluster, c/tau = {p.c_over_tau:.4f} (epsilon "
            f"{2 * p.c_over_tau:.4f} per token), public-difference votes on a public support")
    console.print(
        f"epsilon of rho={p.rho_total:.4f} at delta - delta_phrases = {p.delta_conversion:g}: "
        f"Bun-Steinke {p.epsilon_bun_steinke:.4f}, CKS {p.epsilon_cks:.4f} "
        f"(this plan: {p.conversion}, {p.conversion_reference})")


def print_plan(plan: BudgetPlan | FactsBudgetPlan, console: Console | None = None) -> None:
    """The plan of either generation mode."""
    if isinstance(plan, FactsBudgetPlan):
        print_facts_plan(plan, console)
    else:
        print_budget_plan(plan, console)
