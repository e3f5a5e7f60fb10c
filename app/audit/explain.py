"""``switchyard audit REQUEST_ID`` and ``GET /admin/trace/{request_id}``: one request, explained.

The trace lists the request's attempts in order: each decision with its
candidates ranked as the strategy ranked them (never-tried arms first, as seed
000 picks them before any score; then by score), each factor's contribution,
the excluded deployments and why, the attempt's outcome (status, latency,
tokens, cost), and the final response's status. It carries no prompt or
completion text: the prompt's hash and length, and the response's status,
deployment and error only. With a replay at hand it also says, per decision,
whether the log re-derives it exactly.

Grades: the trace lists the grades applied to the request's answer and,
per decision, the grades its route folded for the decision's candidates since the
route's previous recorded decision (what moved it since; app/audit/grades.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.audit.decision_fields import context_of
from app.audit.grades import grades_before, grades_of
from app.audit.log import RecordedLog, events
from app.contract import AttemptFinished, Candidate, Decision, RequestAccepted

#: What each exclusion reason means, for a person; a reason not listed is shown as it is.
EXCLUSION_REASONS = {
    "already_tried": "already tried by an earlier attempt of this request",
    "breaker_open": "circuit breaker OPEN (too many recent failures)",
    "breaker_half_open_probe_in_flight": "breaker HALF_OPEN and its probe is still in flight",
    "breaker_half_open_probes_in_flight": "breaker HALF_OPEN and all its probe slots are in use",
    "concurrency_full": "max_concurrency calls already in flight",
    "retry_after": "the provider asked (Retry-After) not to be called yet",
    "not_pinned": "the request pinned another deployment",
    "local_first": "a local-first attempt goes to the local deployment",
    "provider_not_in_only": "not in the request's or tenant's `only` list",
    "provider_ignored": "in the request's or tenant's `ignore` list",
    "domain_not_specialist": "not a specialist of the request's domain",
    "specialist_only": "a specialist only, and the request is not in its domain",
}
OUTCOME_FIELDS = (
    "status_class",
    "http_status",
    "latency_ms",
    "tokens_in",
    "tokens_out",
    "tokens_cached",
    "cost_usd",
    "reward",
    "finish_reason",
    "retriable",
    "final",
    "error",
)


def also_read(stream: str, raw: str) -> bool:
    """What a trace reads besides the request's own records: every decision and every
    grade, to show the grades folded before each of its decisions."""
    return stream == "decisions" or (stream == "routing" and '"type":"grade.applied"' in raw)


def ranked(decision: Decision) -> list[Candidate]:
    """Candidates in the order the strategy ranks them (stable: config order on ties)."""
    return sorted(decision.candidates, key=lambda c: (c.score is not None, -(c.score or 0.0)))


def build_trace(
    log: RecordedLog, request_id: str, reproduced: dict[str, bool] | None = None
) -> dict[str, Any] | None:
    """The request's trace as plain JSON, or None when the log has nothing about it."""
    decisions = _first_copies(d for d in events(log.decisions) if d.request_id == request_id)
    outcomes = {o.attempt: o for o in events(log.outcomes) if o.request_id == request_id}
    accepted: dict[str, Any] | None = None
    for entry in log.routing:
        event = entry.event
        if isinstance(event, AttemptFinished) and event.outcome.request_id == request_id:
            outcomes.setdefault(event.outcome.attempt, event.outcome)
        if (
            accepted is None
            and isinstance(event, RequestAccepted)
            and event.request.request_id == request_id
        ):
            accepted = {
                "route": event.route,
                "occurred_at": event.occurred_at.isoformat(),
                "prompt_sha256": event.prompt_sha256,
                "prompt_chars": event.prompt_chars,
                "source": event.source.model_dump(),
                "routing_log": {"partition": entry.partition, "offset": entry.offset},
            }
    responses = [r for r in events(log.responses) if r.request_id == request_id]
    if not (decisions or outcomes or accepted or responses):
        return None
    attempts = []
    for number in sorted({*decisions, *outcomes}):
        decision, outcome = decisions.get(number), outcomes.get(number)
        attempts.append(
            {
                "attempt": number,
                "decision": None
                if decision is None
                else {
                    **_decision(decision, reproduced),
                    "grades_before": grades_before(log, decision),
                },
                "outcome": None
                if outcome is None
                else {
                    "deployment": outcome.deployment,
                    **outcome.model_dump(mode="json", include=set(OUTCOME_FIELDS)),
                },
            }
        )
    response = responses[0] if responses else None
    return {
        "request_id": request_id,
        "accepted": accepted,
        "attempts": attempts,
        "grades": grades_of(log, request_id),
        "response": None
        if response is None
        else {
            "status": response.status,
            "attempts": response.attempts,
            "deployment": response.deployment,
            "error": None if response.error is None else response.error.model_dump(mode="json"),
            "occurred_at": response.occurred_at.isoformat(),
        },
    }


def _first_copies(decisions: Iterable[Decision]) -> dict[int, Decision]:
    found: dict[int, Decision] = {}
    for decision in decisions:
        found.setdefault(decision.attempt, decision)
    return found


def _decision(decision: Decision, reproduced: dict[str, bool] | None) -> dict[str, Any]:
    return {
        "decision_id": decision.id,
        "occurred_at": decision.occurred_at.isoformat(),
        "deployment": decision.deployment,
        "strategy": decision.strategy,
        "algorithm_version": decision.algorithm_version,
        "config_hash": decision.config_hash,
        "state_version": decision.state_version,
        "propensity": decision.propensity,
        "reproduced_by_replay": None if reproduced is None else reproduced.get(decision.id, False),
        "context": context_of(decision),
        "candidates": [
            {
                "rank": rank,
                "deployment": c.deployment,
                "chosen": c.deployment == decision.deployment,
                "score": c.score,
                "never_tried": c.score is None,
                "factors": c.factors,
            }
            for rank, c in enumerate(ranked(decision), start=1)
        ],
        "excluded": [
            {
                "deployment": e.deployment,
                "reason": e.reason,
                "why": EXCLUSION_REASONS.get(e.reason, e.reason),
            }
            for e in decision.excluded
        ],
    }


def render(trace: dict[str, Any]) -> str:
    """The trace for a person."""
    lines = [f"request {trace['request_id']}"]
    accepted = trace["accepted"]
    if accepted is not None:
        where = accepted["routing_log"]
        lines.append(
            f"  accepted {accepted['occurred_at']} on route {accepted['route']!r} "
            f"(routing log partition {where['partition']} offset {where['offset']}); "
            f"prompt sha256 {accepted['prompt_sha256'][:16]}…, {accepted['prompt_chars']} chars"
        )
    for attempt in trace["attempts"]:
        lines.append(f"attempt {attempt['attempt']}")
        decision = attempt["decision"]
        if decision is None:
            lines.append("  decision: not in the record")
        else:
            lines.extend(_render_decision(decision))
        outcome = attempt["outcome"]
        if outcome is None:
            lines.append("  outcome: none recorded (still in flight, or lost)")
        else:
            http = outcome["http_status"] if outcome["http_status"] is not None else "-"
            lines.append(
                f"  outcome: {outcome['status_class']} (HTTP {http}) on {outcome['deployment']}, "
                f"{outcome['latency_ms']:.0f} ms, tokens in {outcome['tokens_in']} "
                f"out {outcome['tokens_out']} cached {outcome['tokens_cached']}, "
                f"cost ${outcome['cost_usd']:.6f}, reward {outcome['reward']}"
                + (f", error {outcome['error']}" if outcome["error"] else "")
                + ("" if outcome["final"] else "; retried")
            )
    response = trace["response"]
    lines.extend(_render_grades(trace.get("grades") or []))
    if response is None:
        lines.append("response: none recorded")
    else:
        error = response["error"]
        lines.append(
            f"response: {response['status']} after {response['attempts']} attempt(s)"
            + (f" from {response['deployment']}" if response["deployment"] else "")
            + (f"; error {error['type']}: {error['message']}" if error else "")
        )
    return "\n".join(lines)


def _render_decision(decision: dict[str, Any]) -> list[str]:
    check = decision["reproduced_by_replay"]
    lines = [
        f"  decision {decision['decision_id']} at {decision['occurred_at']}: "
        f"{decision['deployment']}",
        f"    {decision['strategy']} ({decision['algorithm_version']}), config "
        f"{decision['config_hash']}, state version {decision['state_version']}, "
        f"propensity {decision['propensity']:.3f}"
        + ("" if check is None else f", replay: {'reproduced' if check else 'MISMATCH'}"),
    ]
    if decision["context"]:
        context = ", ".join(f"{k} {v}" for k, v in decision["context"].items())
        lines.append(f"    {context}")
    lines.append("    candidates (ranked):")
    for c in decision["candidates"]:
        score = "never tried (picked before any score)" if c["never_tried"] else f"{c['score']:.6f}"
        factors = ", ".join(f"{name} {value:+.6f}" for name, value in c["factors"].items())
        mark = "*" if c["chosen"] else " "
        lines.append(f"    {mark}{c['rank']}. {c['deployment']}  score {score}  [{factors}]")
    moved = decision.get("grades_before")
    if moved and moved["count"]:
        summary = ", ".join(
            f"{name} {t['grades']} (mean {t['mean_score']:.3f})"
            for name, t in moved["per_deployment"].items()
        )
        lines.append(
            f"    grades folded since routing offset {moved['since_routing_offset']}: "
            f"{moved['count']}: {summary}"
        )
    if decision["excluded"]:
        lines.append("    excluded:")
        lines.extend(f"      {e['deployment']}: {e['why']}" for e in decision["excluded"])
    return lines


def _render_grades(grades: list[dict[str, Any]]) -> list[str]:
    lines = [f"grades of this answer: {len(grades)}"] if grades else []
    for g in grades:
        replaced = "" if g["replaces_score"] is None else f", replaces {g['replaces_score']}"
        lines.append(
            f"  {g['source']} {g['score']} x{g['weight']} on {g['deployment']} "
            f"(routing offset {g['routing_offset']}{replaced})"
        )
    return lines
