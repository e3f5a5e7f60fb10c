"""The side-by-side table of a counterfactual replay: recorded (measured) against alternative."""

from __future__ import annotations

from app.audit.counterfactual import CounterfactualReport, measured_share
from app.audit.estimate import SOURCES


def _range(values: list[float], fmt: str) -> str:
    mean = sum(values) / len(values)
    low, high = min(values), max(values)
    if low == high:
        return format(mean, fmt)
    return f"{format(mean, fmt)} [{format(low, fmt)}, {format(high, fmt)}]"


def _row(label: str, recorded: float, runs: list[float], fmt: str) -> tuple[str, str, str]:
    """A line of the table: the recorded figure, and the alternative's over its runs."""
    return label, format(recorded, fmt), _range(runs, fmt)


def render(report: CounterfactualReport) -> str:
    rec, runs = report.recorded, report.runs
    hashes = ", ".join(sorted(report.recorded_config_hashes)) or "-"
    width = max([len(d) for d in {*rec.share, *(d for r in runs for d in r.share)}] + [24])
    rows: list[tuple[str, str, str]] = [
        ("attempts (decisions)", str(rec.attempts), _range([r.attempts for r in runs], ".1f")),
    ]
    for deployment in sorted({*rec.share, *(d for r in runs for d in r.share)}):
        share = [r.share.get(deployment, 0.0) for r in runs]
        rows.append(_row(f"share {deployment}", rec.share.get(deployment, 0.0), share, ".1%"))
    if rec.cache_hits or any(r.cache_hits for r in runs):
        hits = [float(r.cache_hits) for r in runs]
        rows.append(("answered from the cache", str(rec.cache_hits), _range(hits, ".1f")))
    rows += [
        _row("requests with a success", rec.requests_ok, [r.requests_ok for r in runs], ".1%"),
        _row("mean reward per attempt", rec.mean_reward, [r.mean_reward for r in runs], ".3f"),
        _row(
            "mean latency per attempt ms",
            rec.mean_latency_ms,
            [r.mean_latency_ms for r in runs],
            ".0f",
        ),
        _row("total cost USD", rec.total_cost_usd, [r.total_cost_usd for r in runs], ".4f"),
    ]
    label = width + 6
    lines = [
        f"counterfactual: recorded config_hash {hashes} vs alternative "
        f"{report.alternative_config_hash} ({report.alternative_label})",
        f"{rec.requests} recorded requests; the alternative was folded {len(runs)} time(s) with "
        "seeded outcome draws (figures: mean [min, max] over runs)",
        "",
        f"{'':<{label}} {'recorded (measured)':>20}   alternative (estimated)",
        *(f"{name:<{label}} {left:>20}   {right}" for name, left, right in rows),
        "",
        "decisions changed: first attempts routed elsewhere "
        + _range([r.first_changed for r in runs], ".1f")
        + f" of {rec.requests}",
        "outcome sources of the alternative's attempts (mean per run):",
    ]
    described = {
        "recorded": "recorded: same attempt on the same deployment (measured)",
        "same_request": "same_request: this request on that deployment, other attempt (measured)",
        "estimated": "estimated: seeded draw from the deployment's recorded outcomes",
        "pooled": "pooled: deployment never observed, draw from the whole route (a guess)",
    }
    for source in SOURCES:
        mean = sum(r.sources.get(source, 0) for r in runs) / len(runs)
        lines.append(f"  {described[source]:<76} {mean:10.1f}")
    unresolved = sum(r.unresolved for r in runs) / len(runs)
    if unresolved:
        lines.append(f"  no recorded outcome at all to draw from (left open): {unresolved:.1f}")
    measured = sum(measured_share(r) for r in runs) / len(runs)
    lines += [
        f"measured outcomes: {measured:.1%} of the alternative's attempts; the rest are estimates",
        "estimator basis per deployment (recorded outcomes):",
        f"  {'deployment':<{width}} {'n':>6} {'success':>8} {'95% interval':>15} "
        f"{'latency ms':>11} {'cost USD':>10}",
    ]
    for row in report.basis:
        low, high = row["success_rate_95"]
        lines.append(
            f"  {row['deployment']:<{width}} {row['n']:>6} {row['success_rate']:>8.1%} "
            f"{f'{low:.1%}-{high:.1%}':>15} {row['mean_latency_ms']:>11.0f} "
            f"{row['mean_cost_usd']:>10.6f}"
        )
    never = sorted({d for r in runs for d in r.share} - {row["deployment"] for row in report.basis})
    for deployment in never:
        lines.append(f"  {deployment:<{width}}  never observed: its outcomes are pooled guesses")
    lines.append(
        "The alternative's success, reward, latency and cost are estimates wherever its "
        "outcome is not measured; they are not measurements."
    )
    return "\n".join(lines)
