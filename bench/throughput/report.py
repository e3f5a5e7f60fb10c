"""The markdown report: direct, Switchyard and LiteLLM side by side per mock; decisions; profile."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from bench.throughput.driver import STAGES
from bench.throughput.mocks import MOCK_KINDS
from bench.throughput.workload import (
    TARGET_ADDED_P50_MS,
    TARGET_ADDED_P99_MS,
    TARGET_CPU_MS,
    TARGET_DECISION_P99_US,
    TARGET_RPS,
    TARGET_RPS_VS_LITELLM,
    TARGET_RSS_MB,
    TARGET_THOMPSON_P99_US,
)


def _get(data: dict[str, Any] | None, *path: str) -> Any:
    value: Any = data
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _machine_budget(ours: dict[str, Any] | None, cpus: int) -> str | None:
    """Every process's CPU per request at saturation, and the rate the machine's cores
    would carry at that cost: the broker, the driver and the mocks share them here."""
    sat = _get(ours, "saturation")
    rps = _get(sat, "rps")
    if not sat or not rps or _get(sat, "broker_cpu_ms_per_request") is None:
        return None
    parts = {
        "worker": sat["cpu_ms_per_request"],
        "broker": sat["broker_cpu_ms_per_request"],
        "driver": sat["driver_cpu_ms_per_request"],
        "mock": sat["mock_cpu_utilisation"] * 1000.0 / rps,
    }
    total = sum(parts.values())
    named = " + ".join(f"{name} {value:.2f}" for name, value in parts.items())
    return (
        f"| CPU ms/request at saturation, every process (whole) | – | {named} = {total:.2f}: "
        f"{cpus} cores carry {cpus * 1000.0 / total:,.0f} req/s at that cost | – | – | |"
    )


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "–"
    return f"{ours / theirs:.2f}×"


def _check(value: float | None, target: float, at_least: bool = False) -> str:
    if value is None:
        return "–"
    met = value >= target if at_least else value <= target
    return ("met" if met else "missed") + (f" (≥ {target:g})" if at_least else f" (≤ {target:g})")


QS = ("p50", "p95", "p99")


def _triple(values: Sequence[float | None], digits: int = 1) -> str:
    return " / ".join(_num(v, digits) for v in values)


def _ratios(ours: Sequence[float | None], theirs: Sequence[float | None]) -> str:
    return " / ".join(_ratio(a, b) for a, b in zip(ours, theirs, strict=True))


def decision_target(strategy: str) -> float:
    return TARGET_THOMPSON_P99_US if strategy == "thompson" else TARGET_DECISION_P99_US


def _saturation_check(ours: float | None, litellm: float | None) -> str:
    check = _check(ours, TARGET_RPS, at_least=True)
    if ours is None or not litellm:
        return check
    ratio = ours / litellm
    met = "met" if ratio >= TARGET_RPS_VS_LITELLM else "missed"
    return f"{check}; {met} (≥ {TARGET_RPS_VS_LITELLM:g}× LiteLLM)"


def _added_check(p50: float | None, p99: float | None) -> str:
    return (
        f"p50 {_check(p50, TARGET_ADDED_P50_MS)}, p99 {_check(p99, TARGET_ADDED_P99_MS)}"
        if p50 is not None and p99 is not None
        else "–"
    )


def render_mock_table(kind: str, report: dict[str, Any]) -> str:
    """One mock: direct, Switchyard and LiteLLM side by side, latencies as p50 / p95 / p99."""
    config = report["config"]
    sides = [_get(report, side, "mocks", kind) for side in ("direct", "switchyard", "litellm")]
    ours = sides[1]
    lines = [
        f"| {MOCK_KINDS[kind]}, {config['latency_ms']} ms | direct | Switchyard | LiteLLM "
        "| Switchyard ÷ LiteLLM | Switchyard target |",
        "|---|---:|---:|---:|---:|---|",
    ]

    def cells(path: tuple[str, ...], digits: int = 1) -> list[str]:
        values = [_get(side, *path) for side in sides]
        return [_num(v, digits) for v in values] + [_ratio(values[1], values[2])]

    for phase, rate in (("low", config["low_rate"]), ("fixed", config["rate"])):
        lat = [[_get(side, phase, "latency_ms", q) for q in QS] for side in sides]
        lines.append(
            f"| latency p50 / p95 / p99 at {rate:g} req/s (ms) | {_triple(lat[0])} "
            f"| {_triple(lat[1])} | {_triple(lat[2])} | {_ratios(lat[1], lat[2])} | |"
        )
        added = [
            [None if v is None or d is None else v - d for v, d in zip(side, lat[0], strict=True)]
            for side in lat[1:]
        ]
        check = _added_check(added[0][0], added[0][2]) if phase == "low" else ""
        lines.append(
            f"| added vs direct at {rate:g} req/s (ms) | – | {_triple(added[0])} "
            f"| {_triple(added[1])} | {_ratios(added[0], added[1])} | {check} |"
        )
        same = [_get(ours, phase, "added_ms", q) for q in QS]
        check = _added_check(same[0], same[2]) if phase == "low" else ""
        lines.append(
            f"| added, e2e − the request's own provider call, at {rate:g} req/s (ms) | – "
            f"| {_triple(same)} | – | – | {check} |"
        )
    lines.append(
        f"| arrival rate achieved at {config['rate']:g} req/s (issued per s) | "
        + " | ".join(cells(("fixed", "offered_rps"), 1))
        + " | |"
    )
    rps = cells(("saturation", "rps"), 0)
    saturation = _saturation_check(
        _get(ours, "saturation", "rps"), _get(sides[2], "saturation", "rps")
    )
    lines.append(
        f"| requests/s at saturation ({config['concurrency']} outstanding) | "
        + " | ".join(rps)
        + f" | {saturation} |"
    )
    lat = [[_get(side, "saturation", "latency_ms", q) for q in QS] for side in sides]
    lines.append(
        f"| latency p50 / p95 / p99 at saturation (ms) | {_triple(lat[0])} | {_triple(lat[1])} "
        f"| {_triple(lat[2])} | {_ratios(lat[1], lat[2])} | |"
    )
    rate = f"{config['rate']:g} req/s"
    lines.append(
        f"| CPU ms/request at {rate}, whole process | "
        + " | ".join(cells(("fixed", "cpu_ms_per_request"), 2))
        + " | |"
    )
    for label, phase in ((f"at {rate}", "fixed"), ("at saturation", "saturation")):
        net = _get(ours, phase, "cpu_ms_per_request_net")
        check = _check(net, TARGET_CPU_MS) if phase == "saturation" else ""
        lines.append(
            f"| CPU ms/request {label}, net of idle / no-op driver | "
            + " | ".join(cells((phase, "cpu_ms_per_request_net"), 2))
            + f" | {check} |"
        )
    lines.append(
        "| CPU use at saturation (cores) | "
        + " | ".join(cells(("saturation", "cpu_utilisation"), 2))
        + " | |"
    )
    lines.append(
        "| mock CPU use at saturation (cores) | "
        + " | ".join(cells(("saturation", "mock_cpu_utilisation"), 2))
        + " | |"
    )
    wait = _get(ours, "saturation", "worker_cpu_wait_share")
    lines.append(
        f"| worker runnable but waiting for a CPU at saturation (share of time) | – "
        f"| {_num(wait, 2)} | – | – | |"
    )
    broker = [_get(ours, p, "broker_cpu_utilisation") for p in ("fixed", "saturation")]
    lines.append(
        f"| broker CPU use (cores) at {rate} / saturation | – | {_triple(broker, 2)} | – | – | |"
    )
    budget = _machine_budget(ours, config["cpus"])
    if budget is not None:
        lines.append(budget)
    errors = [
        None
        if side is None
        else sum(
            (_get(side, phase, k) or 0)
            for phase in ("low", "fixed", "saturation")
            for k in ("errors", "timeouts")
        )
        for side in sides
    ]
    lines.append(f"| errors + timeouts | {_triple(errors, 0).replace(' / ', ' | ')} | | |")
    over = [
        name
        for name, side in zip(("direct", "Switchyard", "LiteLLM"), sides, strict=True)
        if (_get(side, "saturation", "rps") or math.inf) < 1.25 * config["rate"]
    ]
    if over:
        lines += [
            "",
            f"{config['rate']:g} req/s is above 80 % of the saturation throughput of "
            f"{' and '.join(over)} here: latency at that rate is mostly queueing.",
        ]
    if _get(ours, "low", "stages_ms") is not None:
        lines += [
            "",
            f"Switchyard, {MOCK_KINDS[kind]}: where a request's time goes (ms, p50 / p99, "
            "from record timestamps)",
            "",
            f"| stage | at {config['low_rate']:g} req/s | at {config['rate']:g} req/s |",
            "|---|---:|---:|",
        ]
        for stage in STAGES:
            cols = [
                _triple([_get(ours, phase, "stages_ms", stage, q) for q in ("p50", "p99")])
                for phase in ("low", "fixed")
            ]
            lines.append(f"| {stage} | {cols[0]} | {cols[1]} |")
    return "\n".join(lines)


def render(report: dict[str, Any]) -> str:
    config = report["config"]
    out = [
        f"## switchyard bench throughput — {config['cpus']} CPUs, load average "
        f"{report['load_start']} at start, {report.get('load_end', '?')} at end",
        "",
    ]
    ceilings = []
    for kind in config["mocks"]:
        rps = _get(report, "direct", "mocks", kind, "saturation", "rps")
        cpu = _get(report, "direct", "mocks", kind, "saturation", "mock_cpu_utilisation")
        ceilings.append(
            f"{MOCK_KINDS[kind]} {_num(rps, 0)} req/s (mock process at {_num(cpu, 2)} cores)"
        )
    if ceilings:
        out += [
            f"Mock ceilings (direct, `make_client()`, {config['concurrency']} in flight, "
            f"{config['latency_ms']} ms latency; the no-wait ceiling is "
            f"{config['concurrency'] * 1000 / max(1, config['latency_ms']):,.0f} req/s): "
            + "; ".join(ceilings)
            + ".",
            "",
        ]
    for kind in config["mocks"]:
        out += [render_mock_table(kind, report), ""]
    sy = report.get("switchyard")
    if sy:
        litellm_rss = _get(report, "litellm", "peak_rss_mb")
        out += [
            f"Worker peak RSS (VmHWM) {_num(sy.get('worker_peak_rss_mb'), 0)} MB "
            f"({_check(sy.get('worker_peak_rss_mb'), TARGET_RSS_MB)}; "
            f"{_num(sy.get('worker_rss_ready_mb'), 0)} MB after the warm-up); LiteLLM process "
            f"{_num(litellm_rss, 0)} MB; direct client process "
            f"{_num(_get(report, 'direct', 'peak_rss_mb'), 0)} MB. Worker idle CPU "
            f"{_num(_get(sy, 'idle', 'worker_cpu_ms_per_s'), 0)} ms/s, broker idle "
            f"{_num(_get(sy, 'idle', 'broker_cpu_ms_per_s'), 0)} ms/s. "
            f"Strategy {sy['strategy']}, {config['deployments']} deployments per mock.",
            "",
        ]
    decisions = report.get("decisions")
    if decisions:
        out += [
            "| decision, 16 candidates | decisions | p50 µs | p99 µs | mean µs | target p99 |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for strategy in ("ucb1", "thompson", "composite", "adaptive"):
            lat = decisions[strategy]["latency_us"]
            out.append(
                f"| `handle` {strategy} | {lat['n']:,} | {lat['p50']:,.0f} | {lat['p99']:,.0f} "
                f"| {lat['mean']:,.0f} | {_check(lat['p99'], decision_target(strategy))} |"
            )
        for name, entry in decisions["router_event_ucb1"].items():
            lat = entry["latency_us"]
            out.append(
                f"| router event ucb1 (parse, row in, fold, row out, sends), "
                f"{name.replace('_', ' ')}, row {entry['row_bytes']:,} B | {lat['n']:,} "
                f"| {lat['p50']:,.0f} | {lat['p99']:,.0f} | {lat['mean']:,.0f} | |"
            )
        out.append("")
        out += _cpu_line(decisions)
        for strategy in ("ucb1", "thompson", "composite", "adaptive"):
            top = decisions[strategy].get("top_costs")
            if top:
                costs = ", ".join(
                    f"{r['function']} {r['self_us_per_decision']:.0f}" for r in top[:5]
                )
                out.append(f"{strategy} top self time (µs per decision, cProfile): {costs}")
        out.append("")
    profile = _get(report, "switchyard", "profile")
    if profile and "samples" in profile:
        out += [
            f"py-spy, worker saturated on the {profile['mock']} mock "
            f"({profile['rps_while_profiled']:.0f} req/s while sampled, "
            f"{profile['samples']:,} samples): self time by innermost frame, and inclusive",
            "",
            "| event-loop task | share |",
            "|---|---:|",
            *(f"| {k} | {v:.1%} |" for k, v in profile["by_task"].items()),
            "",
            "| where (self) | share |",
            "|---|---:|",
            *(f"| {k} | {v:.1%} |" for k, v in profile["self_by_category"].items()),
            "",
            "| inclusive | share |",
            "|---|---:|",
            *(f"| {k} | {v:.1%} |" for k, v in profile["inclusive"].items()),
            "",
        ]
    elif profile:
        out += [f"py-spy: {profile.get('skipped')}", ""]
    return "\n".join(out)


def _cpu_line(decisions: dict[str, Any]) -> list[str]:
    """The decisions' thread CPU time: their own cost, without what a shared machine
    gives to others meanwhile (the wall-time p99 above is judged against the target)."""
    strategies = ("ucb1", "thompson", "composite", "adaptive")
    cpu = [(s, decisions[s].get("cpu_us")) for s in strategies]
    if not all(lat for _, lat in cpu):
        return []
    figures = ", ".join(f"{s} {lat['p50']:,.0f} / {lat['p99']:,.0f}" for s, lat in cpu)
    return [f"`handle` thread CPU time p50 / p99 (µs): {figures}", ""]
