"""What ``switchyard bench outage`` measures, from the recorded topics (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.settings import Topics


@dataclass(frozen=True)
class OutageResult:
    strategy: str
    #: The deployment taken down: the one the strategy had chosen most before the outage.
    dead: str
    requests: int
    availability: float
    first_try_success: float
    detect_s: float | None
    failures_before_detect: int
    recover_s: float | None
    attempts_to_dead: int
    probes_per_breaker_timeout: float | None
    #: Real ms from the broker timestamp of the last outcome on the dead deployment
    #: before the trip to that of the first decision excluding it (any worker's request).
    trip_lag_ms: float | None = None
    #: Decisions sent to the dead deployment after the trip other than half-open probes.
    routed_after_trip: int = 0
    workers: int = 1


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def measure(
    strategy: str,
    records: dict[str, list[dict[str, Any]]],
    topics: Topics,
    ids: list[str],
    outage: tuple[float, float],
    compression: float,
    dead: str,
    workers: int = 1,
) -> OutageResult:
    start, end = outage
    wanted = set(ids)
    responses = {r["request_id"]: r for r in records[topics.responses] if r["request_id"] in wanted}
    ok = [r for r in responses.values() if r["status"] == "ok"]
    decisions = records[topics.decisions]
    outcomes = records[topics.outcomes]
    excluded_at = [
        _seconds(d["occurred_at"])
        for d in decisions
        if _seconds(d["occurred_at"]) >= start
        and any(e["deployment"] == dead and e["reason"] != "already_tried" for e in d["excluded"])
    ]
    detect = min(excluded_at) - start if excluded_at else None
    back = [
        _seconds(o["occurred_at"])
        for o in outcomes
        if o["deployment"] == dead
        and o["status_class"] == "success"
        and _seconds(o["occurred_at"]) >= end
    ]
    recover = min(back) - end if back else None
    during = [
        o for o in outcomes if o["deployment"] == dead and start <= _seconds(o["occurred_at"]) < end
    ]
    before_detect = [
        o for o in during if detect is None or _seconds(o["occurred_at"]) <= start + detect
    ]
    probes = None
    if detect is not None:
        # A probe is an attempt *decided* once the breaker had excluded the deployment;
        # attempts decided before (still in flight at detection) count as detection cost.
        probe_decisions = [
            d
            for d in decisions
            if d["deployment"] == dead and start + detect < _seconds(d["occurred_at"]) < end
        ]
        timeout_s = (60.0 if strategy != "composite" else 30.0) / compression
        windows = max(1.0, (end - start - detect) / timeout_s)
        probes = len(probe_decisions) / windows
    trip_lag_ms, routed_after_trip = trip_delay(decisions, outcomes, dead, start, end)
    return OutageResult(
        strategy=strategy,
        dead=dead,
        requests=len(ids),
        availability=len(ok) / len(ids),
        first_try_success=sum(1 for r in ok if r["attempts"] == 1) / len(ids),
        detect_s=None if detect is None else detect * compression,
        failures_before_detect=len(before_detect),
        recover_s=None if recover is None else recover * compression,
        attempts_to_dead=len(during),
        probes_per_breaker_timeout=probes,
        trip_lag_ms=trip_lag_ms,
        routed_after_trip=routed_after_trip,
        workers=workers,
    )


def trip_delay(
    decisions: list[dict[str, Any]],
    outcomes: list[dict[str, Any]],
    dead: str,
    start: float,
    end: float,
) -> tuple[float | None, int]:
    """How fast the breaker trip reached every decision, and what got through after it.

    Times are broker record timestamps (``_ts``, real seconds): the route's state has
    one writer, so the first decision after the trip honours it, whichever worker
    ingested the request.
    """
    tripped = sorted(
        d["_ts"]
        for d in decisions
        if start <= d["_ts"] < end
        and any(
            e["deployment"] == dead and e["reason"].startswith("breaker_") for e in d["excluded"]
        )
    )
    if not tripped:
        return None, 0
    failures = [o["_ts"] for o in outcomes if o["deployment"] == dead and o["_ts"] <= tripped[0]]
    lag = (tripped[0] - max(failures)) * 1000.0 if failures else None
    leaked = sum(
        1
        for d in decisions
        if d["deployment"] == dead
        and tripped[0] < d["_ts"] < end
        and d["selection_rule"] != "half_open_probe"
    )
    return lag, leaked


def render(results: list[OutageResult]) -> str:
    def fmt(value: float | None, unit: str = "") -> str:
        return "never" if value is None else f"{value:.1f}{unit}"

    lines = [
        "| strategy | dead | requests | availability | first-try success | detect (failures) "
        "| recover "
        "| attempts to dead | probes / breaker timeout | trip → all workers | leaked after trip |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.strategy} | {r.dead} | {r.requests} | {r.availability:.2%} "
            f"| {r.first_try_success:.2%} "
            f"| {fmt(r.detect_s, ' s')} ({r.failures_before_detect}) "
            f"| {fmt(r.recover_s, ' s')} | {r.attempts_to_dead} "
            f"| {fmt(r.probes_per_breaker_timeout)} | {fmt(r.trip_lag_ms, ' ms')} "
            f"| {r.routed_after_trip} |"
        )
    return "\n".join(lines)
