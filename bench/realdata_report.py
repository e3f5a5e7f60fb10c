"""Pure parts of ``switchyard bench realdata``: references, per-run metrics, the table, the plot.

Percentages are of the *best single model*: the one with the highest mean quality
on the file (its quality and cost are 100 %). Beside the strategies: every single
model, the *best single model in hindsight* (highest utility ``q - lambda x $``)
and the *per-prompt oracle* (each prompt to its highest-utility model).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, pstdev
from typing import Any

from bench.realdata_run import Prompt, RunResult


@dataclass(frozen=True, slots=True)
class Reference:
    """The best single model's mean quality and cost: the 100 % of every percentage."""

    model: str
    quality: float
    cost: float


def reference(prompts: Sequence[Prompt]) -> Reference:
    models = list(prompts[0].reward)
    quality = {m: fmean(p.reward[m] for p in prompts) for m in models}
    best = max(models, key=lambda m: (quality[m], -models.index(m)))
    return Reference(best, quality[best], fmean(p.cost[best] for p in prompts))


def metrics(
    quality: Sequence[float], cost: Sequence[float], ref: Reference, lam: float
) -> dict[str, float]:
    q, c = fmean(quality), fmean(cost)
    return {
        "quality": round(q, 6),
        "cost_usd": round(c, 9),
        "quality_pct_of_best": round(100.0 * q / ref.quality, 3),
        "cost_pct_of_best": round(100.0 * c / ref.cost, 3),
        "utility": round(q - lam * c, 6),
    }


def references(prompts: Sequence[Prompt], lam: float) -> list[dict[str, Any]]:
    """Every single model, the best one in hindsight and the per-prompt oracle."""
    ref = reference(prompts)
    models = list(prompts[0].reward)
    rows: list[dict[str, Any]] = []
    for model in models:
        row = metrics(
            [p.reward[model] for p in prompts], [p.cost[model] for p in prompts], ref, lam
        )
        rows.append({"strategy": f"single:{model}", "kind": "single_model", **row})
    best = max(rows, key=lambda r: r["utility"])
    rows.append({**best, "strategy": "best_single_in_hindsight", "kind": "reference",
                 "model": best["strategy"].removeprefix("single:")})  # fmt: skip
    picks = [max(models, key=lambda m: (p.reward[m] - lam * p.cost[m], -models.index(m)))
             for p in prompts]  # fmt: skip
    oracle = metrics(
        [p.reward[m] for p, m in zip(prompts, picks, strict=True)],
        [p.cost[m] for p, m in zip(prompts, picks, strict=True)],
        ref,
        lam,
    )
    rows.append({"strategy": "oracle", "kind": "reference", **oracle,
                 "picks": {m: picks.count(m) for m in models}})  # fmt: skip
    return rows


def summary(
    strategy: str,
    feedback: dict[str, Any],
    runs: Sequence[RunResult],
    ref: Reference,
    lam: float,
    target_pct: float | None = None,
) -> dict[str, Any]:
    """One strategy under one feedback setting, over its seeds (means, and per seed)."""
    per_seed = [metrics(r.quality, r.cost, ref, lam) for r in runs]
    keys = ("quality_pct_of_best", "cost_pct_of_best", "utility", "quality", "cost_usd")
    row: dict[str, Any] = {"strategy": strategy, "kind": "strategy", "feedback": feedback}
    for key in keys:
        row[key] = round(fmean(s[key] for s in per_seed), 6)
    row["quality_pct_sd"] = round(pstdev(s["quality_pct_of_best"] for s in per_seed), 3)
    models = list(runs[0].picks)
    row["picks"] = {m: round(fmean(r.picks[m] for r in runs), 1) for m in models}
    row["seeds"] = per_seed
    if target_pct is not None:
        row["cost_target_pct_of_best"] = target_pct
        row["cost_vs_target_pct"] = [
            round(100.0 * (s["cost_pct_of_best"] / target_pct - 1.0), 2) for s in per_seed
        ]
    return row


def dumps(rows: list[dict[str, Any]]) -> str:
    """Byte-stable JSON: sorted keys, rounded floats."""
    return json.dumps(rows, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def _short(model: str) -> str:
    return model.rsplit("/", 1)[-1]


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| strategy | feedback | quality % of best | cost % of best | utility | picks |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        feedback = row.get("feedback", {}).get("label", "–")
        name = row["strategy"] + (" **(recommended)**" if row.get("recommended") else "")
        picks = row.get("picks", {})
        shown = " / ".join(f"{_short(m)} {n:g}" for m, n in picks.items()) or "–"
        spread = f" ±{row['quality_pct_sd']:.2f}" if row.get("quality_pct_sd") else ""
        lines.append(
            f"| {name} | {feedback} | {row['quality_pct_of_best']:.2f}{spread} | "
            f"{row['cost_pct_of_best']:.2f} | {row['utility']:.4f} | {shown} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Cost vs quality (% of the best single model), every strategy and reference."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, axis = plt.subplots(figsize=(9, 6))
    for row in rows:
        marker = {"single_model": "s", "reference": "*"}.get(row["kind"], "o")
        label = row["strategy"]
        if "feedback" in row:
            label += f" ({row['feedback']['label']})"
        axis.scatter(row["cost_pct_of_best"], row["quality_pct_of_best"], marker=marker, s=50)
        axis.annotate(label, (row["cost_pct_of_best"], row["quality_pct_of_best"]), fontsize=6)
    axis.set_xscale("log")
    axis.set_xlabel("cost, % of the best single model (log)")
    axis.set_ylabel("quality, % of the best single model")
    axis.set_title("switchyard bench realdata: cost vs quality")
    axis.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(figure)
    return path
