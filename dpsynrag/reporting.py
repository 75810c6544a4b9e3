"""Human-readable reports (rich tables) of public quantities: plans and ledgers."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from dpsynrag.accounting.planner import BudgetPlan


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

