"""Tables and plots of a ``bench quality`` result document."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.sim.policies import ORACLE


def _fmt(value: float | None, pattern: str, missing: str = "–") -> str:
    return missing if value is None else pattern.format(value)


def markdown(document: dict[str, Any]) -> str:
    policies = list(document["policies"])
    u = document["utility"]
    lines = [
        f"## Routing quality: seed {document['seed']}, {document['requests']} requests per "
        f"scenario and policy over {document['duration_s'] / 3600:g} simulated hours "
        f"({document['arrival_rate_per_s']:.2f} requests/s)",
        "",
        f"U = accepted − {u['lambda_cost_per_usd']:g}·cost_usd − "
        f"{u['lambda_latency_per_s']:g}·latency_s − {u['failure_penalty']:g}·failed; "
        "regret = the oracle's U minus the policy's, per 1,000 requests "
        "(lower is better, best non-oracle policy in bold).",
        "",
        "| scenario | " + " | ".join(policies) + " |",
        "|---|" + "---:|" * len(policies),
    ]
    for scenario in document["scenarios"]:
        results = scenario["results"]
        contenders = [p for p in policies if p != ORACLE]
        best = min((results[p]["regret_per_1k"] for p in contenders), default=None)
        cells = []
        for policy in policies:
            text = f"{results[policy]['regret_per_1k']:.1f}"
            if policy != ORACLE and best is not None and results[policy]["regret_per_1k"] == best:
                text = f"**{text}**"
            cells.append(text)
        lines.append(f"| {scenario['id']} {scenario['title']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| scenario | policy | regret/1k | availability | first-try ok | accepted "
        "| $ per 1k ok | p95 ms | detect s | recover s | calls while down |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario in document["scenarios"]:
        timed = scenario["incident"] is not None
        for policy in policies:
            r = scenario["results"][policy]
            detect = _fmt(r["detection_s"], "{:.0f}", "never") if timed else "–"
            recover = _fmt(r["recovery_s"], "{:.0f}", "never") if timed else "–"
            wasted = str(r["incident_attempts"]) if timed else "–"
            lines.append(
                f"| {scenario['id']} | {policy} | {r['regret_per_1k']:.1f} "
                f"| {100 * r['availability']:.2f}% | {100 * r['first_try_success']:.2f}% "
                f"| {100 * r['accepted']:.1f}% | {r['cost_per_1k_success_usd']:.2f} "
                f"| {r['latency_p95_ms']:.0f} | {detect} | {recover} | {wasted} |"
            )
    skipped = document.get("skipped") or []
    if skipped:
        lines.append("")
        lines += [f"Skipped {s['policy']}: {s['reason']}." for s in skipped]
    return "\n".join(lines)


def plots(document: dict[str, Any], out: Path) -> list[Path] | None:
    """One PNG per scenario: cumulative regret, then each policy's share per deployment
    over time. None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        return None
    written = []
    hours = document["duration_s"] / 3600.0
    requests = document["requests"]
    for scenario in document["scenarios"]:
        results = scenario["results"]
        policies = list(results)
        used = [
            d
            for d in next(iter(results.values()))["share_series"]
            if any(sum(results[p]["share_series"][d]) for p in policies)
        ]
        colours = plt.get_cmap("tab20")
        panels = len(policies) + 1
        columns = min(3, panels)
        rows = math.ceil(panels / columns)
        figure, axes = plt.subplots(
            rows, columns, figsize=(5.2 * columns, 3.2 * rows), squeeze=False
        )
        flat = [ax for row in axes for ax in row]
        regret = flat[0]
        for policy in policies:
            curve = results[policy]["cumulative_regret"]
            xs = [(i + 1) * curve["every"] * hours / requests for i in range(len(curve["values"]))]
            regret.plot(xs, curve["values"], label=policy, linewidth=1.2)
        regret.set_title("cumulative regret (utility)")
        regret.set_xlabel("simulated hours")
        regret.legend(fontsize=6)
        for ax, policy in zip(flat[1:], policies, strict=False):
            series = results[policy]["share_series"]
            bins = len(next(iter(series.values())))
            totals = [sum(series[d][b] for d in used) or 1 for b in range(bins)]
            xs = [(b + 0.5) * hours / bins for b in range(bins)]
            shares = [[series[d][b] / totals[b] for b in range(bins)] for d in used]
            ax.stackplot(xs, shares, colors=[colours(i % 20) for i in range(len(used))])
            ax.set_title(f"{policy}: share of attempts", fontsize=9)
            ax.set_ylim(0, 1)
            ax.set_xlim(0, hours)
        for ax in flat[:panels]:
            _mark_changes(ax, scenario["changes"])
        for ax in flat[panels:]:
            ax.axis("off")
        figure.legend(
            handles=[Patch(color=colours(i % 20), label=d) for i, d in enumerate(used)],
            loc="lower center",
            ncol=min(4, len(used)),
            fontsize=7,
        )
        figure.suptitle(f"{scenario['id']} {scenario['title']}: {scenario['description']}",
                        fontsize=9)  # fmt: skip
        figure.tight_layout(rect=(0, 0.04 + 0.02 * math.ceil(len(used) / 4), 1, 0.96))
        path = out / f"quality-{scenario['id']}-seed{document['seed']}-n{requests}.png"
        figure.savefig(path, dpi=90)
        plt.close(figure)
        written.append(path)
    return written


def _mark_changes(ax: Any, changes: list[dict[str, Any]]) -> None:
    """Shade each change's window (or mark its instant) on a panel whose x is hours."""
    for change in changes:
        if "start_s" in change:
            start, end = change["start_s"] / 3600, change["end_s"] / 3600
            ax.axvspan(start, end, color="black", alpha=0.12, zorder=3, linewidth=0)
        elif "at_s" in change:
            ax.axvline(change["at_s"] / 3600, color="black", linestyle="--", linewidth=0.8)
