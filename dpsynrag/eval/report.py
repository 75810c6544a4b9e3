"""Evaluation results -> summary rows, a Markdown report shaped like the paper's tables, plots.

The input is the public outcome of an evaluation: a dict

    {"dataset": {...public description...},
     "settings": {...public settings...},
     "methods": [{"method": "dp-synrag", "epsilon": 10.0,        # None: not private
                  "runs": [{"recall_at_k": 0.61, "accuracy": 0.58,
                            "leaks_benign": 0, "leaks_attack": 1,
                            "names_in_corpus": 0, "verbatim_spans": 2,
                            "wall_seconds": 812.0, "rho": 2.2012,
                            "stage_rho": {"histogram": 0.1, "retrieval": 0.145,
                                          "prediction": 1.956}}, ...]}, ...]}

``recall_at_k`` and ``accuracy`` are fractions in [0, 1] (the tables print them as
percentages), as are ``recall_at_k_supported`` and ``accuracy_supported`` (the same over the
``supported_queries`` queries whose answer at least ``settings["min_support"]`` private
notes hold: the paper's SearchQA rule) and ``span_share`` (a synthetic corpus's readability:
the share of its tokens inside token 3-grams that at least 2 private notes hold); the
leakage figures are counts. Any metric may be missing or None for a method
(a non-RAG baseline has no recall and no rho): it is then left out of that method's summary.

Privacy: nothing here touches private data or the ledger. Everything in the input is already
public (released DP output, or measurements the evaluator chose to publish -- leakage counts
on a benchmark of fictitious people); the report only formats it. Do not put private text in
``dataset`` or ``settings``: they are copied into the report verbatim.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dpsynrag.eval.provenance import describe_code

__all__ = [
    "LEAKAGE_METRICS",
    "STAGES",
    "UTILITY_METRICS",
    "summarise",
    "write_markdown",
    "write_plots",
]

UTILITY_METRICS = ("accuracy", "recall_at_k", "recall_at_k_weighted", "accuracy_supported",
                   "recall_at_k_supported", "span_share")
LEAKAGE_METRICS = ("leaks_benign", "leaks_attack", "names_in_corpus", "verbatim_spans",
                   "verbatim_spans_one_note", "verbatim_spans_one_note_in_spans")
STAGES = ("histogram", "retrieval", "prediction", "phrases", "roles", "cluster_facts", "writer")
_LABELS = {
    "accuracy": "Accuracy",
    "recall_at_k": "Recall@k",
    "recall_at_k_weighted": "Recall@k, frequency-weighted",
    "accuracy_supported": "Accuracy, supported queries",
    "recall_at_k_supported": "Recall@k, supported queries",
    "span_share": "Span share",
    "leaks_benign": "Leaks (benign)",
    "leaks_attack": "Leaks (attack)",
    "names_in_corpus": "Names in corpus",
    "verbatim_spans": "Verbatim spans",
    "verbatim_spans_one_note": "Verbatim spans of one note",
    "verbatim_spans_one_note_in_spans": "… within one span",
}
_DASH = "–"
#: A run's records that are not metrics: the code it ran (``eval.provenance``).
RECORD_KEYS = frozenset({"code"})


# ---------------------------------------------------------------------------------- summary
def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def _flatten(run: Mapping[str, Any], where: str) -> dict[str, float]:
    """One run's metrics; a mapping such as ``stage_rho`` becomes ``stage_rho.<stage>``;
    None means missing; ``RECORD_KEYS`` are no metrics."""
    out: dict[str, float] = {}
    for name, value in run.items():
        if value is None or name in RECORD_KEYS:
            continue
        if isinstance(value, Mapping):
            for stage, number in value.items():
                if number is not None:
                    out[f"{name}.{stage}"] = _number(number, f"{where}.{name}.{stage}")
        else:
            out[name] = _number(value, f"{where}.{name}")
    return out


def _entries(results: Mapping[str, Any]) -> list[tuple[str, float | None, list[dict[str, float]]]]:
    """(method, epsilon, flattened runs), entries with the same (method, epsilon) merged."""
    methods = results.get("methods")
    if not isinstance(methods, Sequence) or isinstance(methods, str):
        raise ValueError("results['methods'] must be a list of method entries")
    merged: dict[tuple[str, float | None], list[dict[str, float]]] = {}
    for index, entry in enumerate(methods):
        where = f"methods[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("method"), str):
            raise ValueError(f"{where}: needs a 'method' name")
        epsilon = entry.get("epsilon")
        if epsilon is not None:
            epsilon = _number(epsilon, f"{where}.epsilon")
            if epsilon <= 0:
                raise ValueError(f"{where}.epsilon must be positive (None: not private)")
        runs = entry.get("runs", [])
        if not isinstance(runs, Sequence) or not all(isinstance(r, Mapping) for r in runs):
            raise ValueError(f"{where}.runs must be a list of metric mappings")
        merged.setdefault((entry["method"], epsilon), []).extend(
            _flatten(run, f"{where}.runs[{n}]") for n, run in enumerate(runs))
    return [(method, epsilon, runs) for (method, epsilon), runs in merged.items()]


def summarise(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Mean and standard deviation of every metric, per (method, epsilon).

    Returns one row per (method, epsilon) in input order (entries repeating a pair are
    merged): ``{"method", "epsilon", "n_runs", "metrics": {name: {"mean", "std", "n"}}}``.
    Both are computed exactly (``statistics``, rational arithmetic) and rounded once.
    ``std`` is the *sample* standard deviation (n - 1 in the denominator) over the runs that
    report the metric, and 0.0 for a single run. ``stage_rho`` appears as
    ``stage_rho.histogram``, ``stage_rho.retrieval``, ``stage_rho.prediction``.
    """
    rows = []
    for method, epsilon, runs in _entries(results):
        names: list[str] = []
        for run in runs:
            names.extend(name for name in run if name not in names)
        metrics = {}
        for name in names:
            values = [run[name] for run in runs if name in run]
            metrics[name] = {
                "mean": statistics.mean(values),
                "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                "n": len(values),
            }
        rows.append({"method": method, "epsilon": epsilon, "n_runs": len(runs),
                     "metrics": metrics})
    return rows


# ---------------------------------------------------------------------------------- markdown
def _cell(stats: Mapping[str, float] | None, *, scale: float = 1.0, digits: int = 2,
          hide_zero_std: bool = False) -> str:
    """``mean ± std`` (one value for a single run), or a dash when the metric is missing."""
    if stats is None:
        return _DASH
    mean = f"{stats['mean'] * scale:.{digits}f}"
    if stats["n"] < 2 or (hide_zero_std and stats["std"] == 0):
        return mean
    return f"{mean} ± {stats['std'] * scale:.{digits}f}"


def _eps_label(epsilon: float | None) -> str:
    return "no DP" if epsilon is None else f"ε = {epsilon:g}"


def _eps_cell(epsilon: float | None) -> str:
    return "no DP" if epsilon is None else f"{epsilon:g}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def _k_label(settings: Mapping[str, Any]) -> str:
    for key in ("rag_k", "retrieval_k", "k"):
        value = settings.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return f"Recall@{value}"
    return "Recall@k"


def _ordered(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Non-private rows first (input order), then private rows by method and epsilon."""
    public = [row for row in summary if row["epsilon"] is None]
    private = [row for row in summary if row["epsilon"] is not None]
    methods = list(dict.fromkeys(row["method"] for row in private))
    private.sort(key=lambda row: (methods.index(row["method"]), row["epsilon"]))
    return public + private


def _utility_table(summary: list[dict[str, Any]], metric: str, scale: float) -> list[str]:
    """Rows = methods, columns = epsilon values (plus ``no DP`` for non-private methods)."""
    epsilons = sorted({row["epsilon"] for row in summary if row["epsilon"] is not None})
    columns: list[float | None] = ([None] if any(r["epsilon"] is None for r in summary)
                                   else []) + epsilons
    methods = list(dict.fromkeys(row["method"] for row in _ordered(summary)))
    by_key = {(row["method"], row["epsilon"]): row for row in summary}
    rows = []
    for method in methods:
        cells = [method]
        for epsilon in columns:
            row = by_key.get((method, epsilon))
            cells.append(_DASH if row is None else
                         _cell(row["metrics"].get(metric), scale=scale))
        rows.append(cells)
    return _table(["Method", *(_eps_label(e) for e in columns)], rows)


def _support_label(summary: list[dict[str, Any]], settings: Mapping[str, Any]) -> str:
    """"the N queries whose answer at least M private notes hold" (as far as known)."""
    counts = {row["metrics"]["supported_queries"]["mean"] for row in summary
              if "supported_queries" in row["metrics"]}
    count = f"{int(next(iter(counts)))} " if len(counts) == 1 else ""
    support = settings.get("min_support")
    at_least = (f"at least {support}" if isinstance(support, int)
                and not isinstance(support, bool) else "enough")
    return f"the {count}queries whose answer {at_least} private notes hold"


def _ratio_tables(summary: list[dict[str, Any]], settings: Mapping[str, Any]) -> list[str]:
    """Accuracy and recall of every private method as a multiple of private RAG's (the same
    reader, k and prompt over the private notes): the first-class comparison of a synthetic
    corpus; also over the supported queries where the runs report them. Empty without a
    ``rag`` row."""
    rag = next((row for row in summary if row["method"] == "rag"), None)
    private = [row for row in _ordered(summary) if row["epsilon"] is not None]
    if rag is None or not private:
        return []
    lines = ["### Against private RAG (mean ÷ RAG's mean)", ""]
    metrics = [("accuracy", "accuracy × RAG"), ("recall_at_k", f"{_k_label(settings)} × RAG")]
    supported = [(m, label) for m, label in (
        ("accuracy_supported", "accuracy, supported × RAG"),
        ("recall_at_k_supported", f"{_k_label(settings)}, supported × RAG"))
        if m in rag["metrics"] and any(m in row["metrics"] for row in private)]
    if supported:
        lines = [*lines[:1], "",
                 f"Supported: over {_support_label(summary, settings)} (the paper's SearchQA "
                 "rule).", ""]
        metrics += supported
    rows = []
    for row in private:
        cells = [row["method"], _eps_cell(row["epsilon"])]
        for metric, _ in metrics:
            base = rag["metrics"].get(metric, {}).get("mean")
            mine = row["metrics"].get(metric, {}).get("mean")
            cells.append(_DASH if not base or mine is None else f"{mine / base:.2f}")
        rows.append(cells)
    return [*lines, *_table(["Method", "ε", *(label for _, label in metrics)], rows), ""]


def write_markdown(results: Mapping[str, Any], path: str | Path, *,
                   percent: bool = True) -> Path:
    """Write the report: dataset and settings, Table 1 (accuracy and recall@k, mean ± std,
    rows = methods, columns = epsilon), Table 2 (leakage), the spent budget per stage, and
    wall times. ``percent``: print the utility fractions as percentages (x 100).
    """
    summary = summarise(results)
    ordered = _ordered(summary)
    scale = 100.0 if percent else 1.0
    unit = " (%)" if percent else ""
    settings = results.get("settings") or {}
    lines = ["# Evaluation report", ""]
    for title, block in (("Dataset", results.get("dataset") or {}), ("Settings", settings)):
        if block:
            lines += [f"## {title}", ""]
            lines += [f"- {key}: {value}" for key, value in block.items()]
            lines.append("")
    runs = [run for entry in results.get("methods") or [] for run in entry.get("runs") or []]
    if runs:
        lines += ["## Code", "", "The package each run imported (`eval.provenance`):", ""]
        lines += [f"- {line}" for line in describe_code(run.get("code") for run in runs)]
        lines.append("")

    lines += ["## Table 1: utility", "",
              "Mean ± sample standard deviation over runs (a single value: one run). "
              "Columns are the privacy budgets ε; `no DP` holds the non-private baselines.", ""]
    support = _support_label(summary, settings)
    for metric, label in (("accuracy", "Accuracy"), ("recall_at_k", _k_label(settings)),
                          ("recall_at_k_weighted",
                           _k_label(settings) + ", frequency-weighted (queries weighted by "
                           "the notes that hold their answer)"),
                          ("accuracy_supported", f"Accuracy over {support}"),
                          ("recall_at_k_supported", f"{_k_label(settings)} over {support}")):
        if not any(metric in row["metrics"] for row in ordered):
            continue
        lines += [f"### {label}{unit}", "", *_utility_table(summary, metric, scale), ""]
    lines += _ratio_tables(summary, settings)

    readable = [row for row in summary if "span_share" in row["metrics"]]
    if readable:
        lines += ["## Readability of the corpus", "",
                  "Span share: the share of a synthetic corpus's tokens (Treebank tokens, all "
                  "texts pooled) that lie inside a window of 3 tokens that at least 2 private "
                  "notes also hold: text units share, not a keyword list. Mean ± std over "
                  f"runs{unit}.", "",
                  *_utility_table(readable, "span_share", scale), ""]

    lines += ["## Table 2: leakage", ""]
    rows = [[row["method"], _eps_cell(row["epsilon"]),
             *(_cell(row["metrics"].get(m)) for m in LEAKAGE_METRICS)] for row in ordered]
    lines += [*_table(["Method", "ε", *(_LABELS[m] for m in LEAKAGE_METRICS)], rows), ""]

    budget_rows = [row for row in ordered if "rho" in row["metrics"]
                   or any(f"stage_rho.{s}" in row["metrics"] for s in STAGES)]
    if budget_rows:
        lines += ["## Privacy budget (ρ-zCDP, after composition)", "",
                  "Mean over runs; ± only where the runs differ.", ""]
        stages = [s for s in STAGES
                  if any(f"stage_rho.{s}" in row["metrics"] for row in budget_rows)]
        rows = [[row["method"], _eps_cell(row["epsilon"]),
                 _cell(row["metrics"].get("rho"), digits=4, hide_zero_std=True),
                 *(_cell(row["metrics"].get(f"stage_rho.{s}"), digits=4, hide_zero_std=True)
                   for s in stages)]
                for row in budget_rows]
        lines += [*_table(["Method", "ε", "ρ total", *stages], rows), ""]

    query_rows = [row for row in ordered if "epsilon_total" in row["metrics"]]
    if query_rows:
        lines += ["## Query-time methods: what the queries cost in total", "",
                  "For query-time methods ε is per query; every query (benign and attack) is "
                  "charged to one ledger and composed (zCDP, or basic composition for the "
                  "(ε, δ) mechanisms). A synthetic corpus costs its ε once, for any number of "
                  "queries.", ""]
        rows = [[row["method"], _eps_cell(row["epsilon"]),
                 _cell(row["metrics"].get("queries_charged"), digits=0, hide_zero_std=True),
                 _cell(row["metrics"].get("epsilon_total"), digits=2, hide_zero_std=True),
                 _cell(row["metrics"].get("delta_total"), digits=6, hide_zero_std=True),
                 _cell(row["metrics"].get("ptr_pass_rate"), digits=1)]
                for row in query_rows]
        lines += [*_table(["Method", "ε per query", "Queries", "Total ε", "Total δ",
                           "PTR pass (%)"], rows), ""]

    lines += ["## Wall time (seconds)", ""]
    rows = [[row["method"], _eps_cell(row["epsilon"]), str(row["n_runs"]),
             _cell(row["metrics"].get("wall_seconds"), digits=1)] for row in ordered]
    lines += [*_table(["Method", "ε", "Runs", "Wall seconds"], rows), ""]

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------- plots
def write_plots(results: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """Write PNG plots into ``out_dir`` and return their paths.

    * ``utility_vs_epsilon.png``: recall@k and accuracy (mean ± std error bars) against
      epsilon for each private method, horizontal lines for the non-private baselines.
    * ``budget_by_stage.png``: stacked bars of the mean rho per stage (histogram, retrieval,
      prediction) for each private method and epsilon; written only when some run reports
      ``stage_rho``.

    matplotlib is imported here (Agg canvas, no display, no pyplot global state).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    summary = summarise(results)
    settings = results.get("settings") or {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    public = [row for row in summary if row["epsilon"] is None]
    private = [row for row in _ordered(summary) if row["epsilon"] is not None]
    methods = list(dict.fromkeys(row["method"] for row in private))
    epsilons = sorted({row["epsilon"] for row in private})

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    panels = (("recall_at_k", _k_label(settings)), ("accuracy", "Accuracy"))
    for axis, (metric, label) in zip(fig.subplots(1, 2), panels, strict=True):
        drawn = False
        for method in methods:
            points = [(row["epsilon"], row["metrics"][metric]) for row in private
                      if row["method"] == method and metric in row["metrics"]]
            if points:
                axis.errorbar([p[0] for p in points], [p[1]["mean"] for p in points],
                              yerr=[p[1]["std"] for p in points], marker="o", capsize=4,
                              label=method)
                drawn = True
        styles = ("--", ":", "-.", (0, (5, 1, 1, 1)))
        for n, row in enumerate(public):
            if metric in row["metrics"]:
                axis.axhline(row["metrics"][metric]["mean"], linestyle=styles[n % len(styles)],
                             color=f"C{(len(methods) + n) % 10}", label=f"{row['method']} (no DP)")
                drawn = True
        if len(epsilons) > 1 and epsilons[-1] / epsilons[0] >= 10:
            axis.set_xscale("log")
            axis.minorticks_off()
        if epsilons:
            axis.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
        axis.set_xlabel("ε")
        axis.set_ylabel(label)
        axis.set_title(f"{label} vs ε")
        axis.grid(alpha=0.3)
        if drawn:
            axis.legend(fontsize="small")
        else:
            axis.text(0.5, 0.5, "no data", ha="center", va="center", transform=axis.transAxes)
    path = out / "utility_vs_epsilon.png"
    fig.savefig(path, format="png", dpi=110)
    written.append(path)

    staged = [row for row in private
              if any(f"stage_rho.{s}" in row["metrics"] for s in STAGES)]
    if staged:
        fig = Figure(figsize=(max(6.0, 1.1 * len(staged) + 3.5), 4.2), layout="constrained")
        FigureCanvasAgg(fig)
        axis = fig.subplots()
        labels = [f"{row['method']}\nε={row['epsilon']:g}" for row in staged]
        positions = list(range(len(staged)))
        bottom = [0.0] * len(staged)
        for n, stage in enumerate(STAGES):
            heights = [row["metrics"].get(f"stage_rho.{stage}", {"mean": 0.0})["mean"]
                       for row in staged]
            axis.bar(positions, heights, bottom=bottom, label=stage, color=f"C{n}")
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        axis.set_xticks(positions, labels, fontsize="small")
        axis.set_ylabel("ρ (zCDP, after composition)")
        axis.set_title("Where the budget goes")
        axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        axis.grid(axis="y", alpha=0.3)
        path = out / "budget_by_stage.png"
        fig.savefig(path, format="png", dpi=110)
        written.append(path)
    return written
