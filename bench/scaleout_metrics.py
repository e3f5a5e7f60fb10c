"""The pure parts of ``switchyard bench scaleout``: the schedule, the routes, what was measured.

Nothing here starts a process or reads a broker: the live side is
:mod:`bench.scaleout` and :mod:`bench.scaleout_stack`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.outage_metrics import trip_delay
from bench.queue_fates import drain_rates, error_kinds
from bench.throughput.stats import latency_dict

Record = Mapping[str, Any]


@dataclass(frozen=True)
class Step:
    """One thing done to the stack during the steady load, at ``at`` of its duration."""

    at: float
    action: str  # "add", "outage", "kill", "stop", "recover"
    worker: int | None = None

    def label(self) -> str:
        return self.action if self.worker is None else f"{self.action} worker-{self.worker}"


#: Add a 2nd and a 3rd worker, take one deployment down, SIGKILL the first worker,
#: SIGTERM the second, bring the deployment back: the third worker ends alone.
TIMELINE: tuple[Step, ...] = (
    Step(0.10, "add", 1),
    Step(0.25, "add", 2),
    Step(0.35, "outage"),
    Step(0.50, "kill", 0),
    Step(0.65, "stop", 1),
    Step(0.80, "recover"),
)


def schedule(duration_s: float, steps: Sequence[Step] = TIMELINE) -> list[tuple[float, Step]]:
    """Seconds after the load starts at which each step is taken, in order."""
    if duration_s <= 0:
        raise ValueError("the steady load needs a positive duration")
    return sorted(((step.at * duration_s, step) for step in steps), key=lambda item: item[0])


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (murmur2, as Faust's producer) gives ``key``."""
    from aiokafka.partitioner import murmur2

    return int(murmur2(key) & 0x7FFFFFFF) % partitions


def pick_routes(count: int, partitions: int, prefix: str = "r") -> list[str]:
    """``count`` route names whose keys land on distinct routing-log partitions, so the
    routes (each a single writer) spread evenly over the workers that own the partitions."""
    if not 0 < count <= partitions:
        raise ValueError(f"need 1..{partitions} routes for {partitions} partitions, got {count}")
    taken: dict[int, str] = {}
    index = 0
    while len(taken) < count:
        name = f"{prefix}{index:02d}"
        taken.setdefault(partition_of(name.encode(), partitions), name)
        index += 1
    return sorted(taken.values())


def request_body(request_id: str, route: str) -> dict[str, Any]:
    messages = [{"role": "user", "content": "hi"}]
    return {"request_id": request_id, "model": route, "messages": messages}


def answers(ids: Sequence[str], responses: Iterable[Record]) -> dict[str, Any]:
    """Answered, lost (ids), duplicate copies (same response id) and conflicting answers
    (a request with two different response ids) among ``ids``."""
    wanted = set(ids)
    copies: Counter[str] = Counter()
    distinct: dict[str, set[str]] = {}
    first: dict[str, Record] = {}
    for response in responses:
        request_id = str(response.get("request_id"))
        if request_id not in wanted:
            continue
        copies[str(response.get("id"))] += 1
        distinct.setdefault(request_id, set()).add(str(response.get("id")))
        first.setdefault(request_id, response)
    lost = sorted(wanted - set(first))
    return {
        "requests": len(ids),
        "answered": len(first),
        "lost": len(lost),
        "lost_ids": lost[:100],
        "ok": sum(1 for r in first.values() if r.get("status") == "ok"),
        "errors": error_kinds(first.values()),
        "duplicate_copies": sum(n - 1 for n in copies.values()),
        "requests_with_duplicates": sum(1 for r in first if copies[str(first[r].get("id"))] > 1),
        "conflicting_answers": sorted(r for r, ids_ in distinct.items() if len(ids_) > 1)[:100],
    }


def breaker_per_route(
    decisions: Sequence[dict[str, Any]],
    outcomes: Sequence[dict[str, Any]],
    routes: Sequence[str],
    dead: str,
    outage: tuple[float, float],
) -> dict[str, Any]:
    """Per route (each has its own breaker): how fast the trip reached the next decision,
    by broker timestamps, and decisions to ``dead`` after it other than half-open probes."""
    start, end = outage
    per_route: dict[str, dict[str, Any]] = {}
    for route in routes:
        mine = [d for d in decisions if d.get("route") == route]
        theirs = [o for o in outcomes if o.get("route") == route]
        lag, leaked = trip_delay(mine, theirs, dead, start, end)
        during = [d for d in mine if d["deployment"] == dead and start <= d["_ts"] < end]
        per_route[route] = {
            "trip_lag_ms": lag,
            "leaked_after_trip": leaked,
            "probes": sum(1 for d in during if d.get("selection_rule") == "half_open_probe"),
            "attempts_to_dead": len(during),
            "tripped": any(
                str(e.get("reason", "")).startswith("breaker_") and e.get("deployment") == dead
                for d in mine
                if start <= d["_ts"] < end
                for e in d.get("excluded") or []
            ),
        }
    lags = [r["trip_lag_ms"] for r in per_route.values() if r["trip_lag_ms"] is not None]
    return {
        "dead": dead,
        "outage_s": end - start,
        "routes_tripped": sum(1 for r in per_route.values() if r["tripped"]),
        "trip_lag_ms": latency_dict(lags),
        "leaked_after_trip": sum(r["leaked_after_trip"] for r in per_route.values()),
        "probes": sum(r["probes"] for r in per_route.values()),
        "attempts_to_dead": sum(r["attempts_to_dead"] for r in per_route.values()),
        "per_route": per_route,
    }


def routes_by_partition(events: Iterable[tuple[int, str | None]]) -> dict[str, list[int]]:
    """Route → the routing-log partitions its events were on (one each, when keyed right)."""
    found: dict[str, set[int]] = {}
    for partition, route in events:
        if route:
            found.setdefault(route, set()).add(partition)
    return {route: sorted(parts) for route, parts in sorted(found.items())}


STALL = "wait_empty: Waiting for tasks"


def rebalance_stalls(log_text: str) -> dict[str, Any]:
    """From a worker's log: Faust's "waiting for unacked events before the rebalance" lines
    (every ~10 s while it waits), the first and last of them, and failed heartbeats."""
    stalls = [line for line in log_text.splitlines() if STALL in line]
    return {
        "wait_empty_warnings": len(stalls),
        "first": stalls[0][1:24] if stalls else None,
        "last": stalls[-1][1:24] if stalls else None,
        "heartbeats_failed_rebalancing": log_text.count("because it is rebalancing"),
    }


def burst_summary(
    published: Mapping[str, float],
    first: Mapping[str, Record],
    cpu_s: Mapping[str, float],
    rss_mb: Mapping[str, float | None],
) -> dict[str, Any]:
    """A burst's ok/s (first publish → last ok; steady 10th–90th pct), and CPU per process."""
    ok_times = [float(first[i]["_ts"]) for i in published if first.get(i, {}).get("status") == "ok"]
    start = min(published.values(), default=0.0)
    drain = drain_rates(start, ok_times)
    span = drain["last_ok_s"] or 0.0
    ok = len(ok_times)
    return {
        "requests": len(published),
        "answered": sum(1 for i in published if i in first),
        "ok": ok,
        "ok_per_s": drain["overall"],
        "steady_ok_per_s": drain["steady"],
        "seconds": span,
        "cpu_s": dict(cpu_s),
        "cpu_ms_per_ok": {k: v * 1000.0 / ok for k, v in cpu_s.items()} if ok else {},
        "cpu_share": {k: v / span for k, v in cpu_s.items()} if span > 0 else {},
        "rss_mb": dict(rss_mb),
    }


def _num(value: float | None, spec: str = "{:.1f}") -> str:
    return "–" if value is None else spec.format(value)


def _replayed(counts: Mapping[str, Any]) -> str:
    return f"{counts.get('reproduced')} / {counts.get('recorded')}, {counts.get('mismatched')}"


def render_steady(report: Mapping[str, Any]) -> list[str]:
    got, breaker, rep = report["answers"], report["breaker"], report["replay"]
    lag = breaker.get("trip_lag_ms") or {}
    decisions, responses = rep.get("decisions", {}), rep.get("responses", {})
    steps = ", ".join(f"{s['label']} +{s['at_s']:.0f}s" for s in report["steps"])
    errors = ", ".join(f"{k} {v}" for k, v in got["errors"].items()) or "0"
    rows = [
        ("requests (steady rate, routes, partitions)",
         f"{got['requests']:,} ({report['rate']:g}/s, {report['routes']}, {report['partitions']})"),
        ("membership and outage steps", steps),
        ("answered / lost", f"{got['answered']:,} / {got['lost']}"),
        ("ok / errors", f"{got['ok']:,} / {errors}"),
        ("duplicate response copies (same id) / requests with a copy",
         f"{got['duplicate_copies']} / {got['requests_with_duplicates']}"),
        ("requests with two different answers", str(len(got["conflicting_answers"]))),
        ("breaker: routes tripped / routes", f"{breaker['routes_tripped']} / {report['routes']}"),
        ("trip → next decision, ms p50 / max (broker timestamps)",
         f"{_num(lag.get('p50'))} / {_num(lag.get('max'))}"),
        ("decisions to the dead deployment after the trip, not probes",
         str(breaker["leaked_after_trip"])),
        ("half-open probes / attempts to the dead deployment during the outage",
         f"{breaker['probes']} / {breaker['attempts_to_dead']}"),
        ("replay: decisions reproduced / recorded, mismatched",
         _replayed(decisions)),
        ("replay: responses reproduced / recorded, mismatched",
         _replayed(responses)),
        ("replay: not re-derived / not recorded (pending)",
         f"{rep.get('not_rederived')} / {rep.get('not_recorded')} ({rep.get('pending')})"),
        ("replay ok", str(rep.get("ok"))),
        ("rebalance stalls: Faust wait_empty warnings per worker (~1 per 10 s stalled)",
         ", ".join(f"{w} {s['wait_empty_warnings']}"
                   for w, s in report.get("rebalance_stalls", {}).items()) or "–"),
    ]  # fmt: skip
    head = ["## Rebalances under steady traffic", "", "| | result |", "|---|---|"]
    return head + [f"| {name} | {value} |" for name, value in rows]


def render_bursts(bursts: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "## Burst throughput",
        "",
        "| burst | workers | ok / requests | ok/s (steady) | s | CPU s per worker "
        "| worker CPU ms per ok | broker, mocks, driver CPU s | worker RSS MB (peak) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for burst in bursts:
        if "cpu_s" not in burst:
            continue
        cpu = burst["cpu_s"]
        workers = sorted(k for k in cpu if k.startswith("worker"))
        worker_cpu = sum(cpu[w] for w in workers)
        rss = burst["rss_mb"]
        lines.append(
            f"| {burst['name']} | {len(workers)} | {burst['ok']:,} / {burst['requests']:,} "
            f"| {_num(burst['ok_per_s'], '{:.0f}')} ({_num(burst['steady_ok_per_s'], '{:.0f}')}) "
            f"| {burst['seconds']:.1f} | {', '.join(f'{cpu[w]:.1f}' for w in workers)} "
            f"| {worker_cpu * 1000.0 / max(1, burst['ok']):.2f} "
            f"| {cpu.get('broker', 0.0):.1f}, {cpu.get('mocks', 0.0):.1f}, "
            f"{cpu.get('driver', 0.0):.1f} "
            f"| {', '.join(_num(rss.get(w), '{:.0f}') for w in workers)} |"
        )
    return lines


def render(report: Mapping[str, Any]) -> str:
    parts: list[str] = []
    if "steady" in report:
        parts += [*render_steady(report["steady"]), ""]
    if "bursts" in report:
        parts += [*render_bursts(report["bursts"]), ""]
    if "fold" in report:
        fold = report["fold"]
        parts.append(
            f"Pure fold (replay's re-derivation, one process): {fold['events']:,} routing "
            f"events in {fold['cpu_s']:.2f} CPU s = {_num(fold['events_per_cpu_s'], '{:,.0f}')} "
            "events/s."
        )
    for phase, error in (report.get("errors") or {}).items():
        parts.append(f"**{phase} failed**: {error}")
    return "\n".join(parts)
