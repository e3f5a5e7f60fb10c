"""Checking the routing log's grades against their evidence.

A ``GradeApplied`` on the routing log is derived from two recorded things: a
feedback record on ``llm.feedback`` (request id, source, score or label, weight,
feedback id) and the request's final successful outcome (route, deployment,
context), which the routing log itself carries as an ``AttemptFinished``. Replay
folds every grade with the live fold (a decision that depends on an altered grade
comes out differently); this check also re-derives each grade from its evidence,
so altering a grade, or the feedback it came from, is caught even where no later
decision happened to depend on it:

* its feedback exists and says the same (source, score, weight, request);
* its request was answered ``success`` on its route by its deployment (and context);
* its id is the one the matcher derives from request and feedback id;
* ``replaces_*`` is the previous grade from the same source for the same request
  (in routing-log order), none for the first;
* a feedback id is applied once (an identical re-send after a crash counts once).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.audit.log import RecordedLog, events
from app.contract import AttemptFinished, Decision, Feedback, GradeApplied, StatusClass
from app.grades.matching import grade_id


@dataclass
class GradeCheck:
    recorded: int = 0
    verified: int = 0
    #: One line per grade that its evidence does not support (no free text: ids and numbers).
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self, limit: int = 20) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            "verified": self.verified,
            "problems": self.problems[:limit],
        }


def _answers(log: RecordedLog) -> dict[str, tuple[str, str, str | None]]:
    """Request id -> (route, deployment, context) of its final successful attempt."""
    found: dict[str, tuple[str, str, str | None]] = {}
    for event in events(log.routing):
        if isinstance(event, AttemptFinished) and (answer := answer_of(event)) is not None:
            found.setdefault(event.outcome.request_id, answer)
    return found


def answer_of(event: AttemptFinished) -> tuple[str, str, str | None] | None:
    """(route, deployment, context) of a final successful attempt; None for any other."""
    outcome = event.outcome
    if outcome.final and outcome.status_class is StatusClass.SUCCESS:
        return outcome.route, outcome.deployment, getattr(outcome, "context", None)
    return None


def _feedback(feedback: Iterable[Feedback]) -> dict[tuple[str, str], list[Feedback]]:
    by_id: dict[tuple[str, str], list[Feedback]] = {}
    for item in feedback:
        by_id.setdefault((item.request_id, str(item.feedback_id)), []).append(item)
    return by_id


def _distinct_grades(grades: Iterable[GradeApplied]) -> list[GradeApplied]:
    """Grades in routing-log order; an identical copy (a re-send) counts once."""
    seen: dict[str, GradeApplied] = {}
    ordered: list[GradeApplied] = []
    for event in grades:
        if seen.get(event.id) == event:
            continue
        seen.setdefault(event.id, event)
        ordered.append(event)
    return ordered


def check_grades(log: RecordedLog) -> GradeCheck:
    """Every grade of the routing log checked against the feedback and the answers."""
    grades = [e for e in events(log.routing) if isinstance(e, GradeApplied)]
    if not grades:
        return GradeCheck()
    return check_grade_events(grades, _answers(log), events(log.feedback))


def check_grade_events(
    grades: Iterable[GradeApplied],
    answers: Mapping[str, tuple[str, str, str | None]],
    feedback: Iterable[Feedback],
) -> GradeCheck:
    """:func:`check_grades` from its parts: the routing log's grades in log order, each
    request's answer (:func:`answer_of` of its first final successful attempt in log
    order) and the readable feedback records."""
    grades = _distinct_grades(grades)
    if not grades:
        return GradeCheck()
    by_id = _feedback(feedback)
    current: dict[tuple[str, str], GradeApplied] = {}
    applied: set[tuple[str, str]] = set()
    result = GradeCheck()
    for grade in grades:
        result.recorded += 1
        key = (grade.request_id, grade.feedback_id)
        problems = _against_feedback(grade, by_id.get(key, []))
        problems += _against_answer(grade, answers.get(grade.request_id))
        previous = current.get((grade.request_id, grade.source))
        problems += _against_previous(grade, previous)
        if key in applied:
            problems.append("feedback id applied twice")
        if grade.id != grade_id(grade.request_id, grade.feedback_id):
            problems.append("id is not derived from request and feedback id")
        applied.add(key)
        current[(grade.request_id, grade.source)] = grade
        if problems:
            where = f"grade {grade.id} (request {grade.request_id!r})"
            result.problems.extend(f"{where}: {p}" for p in problems)
        else:
            result.verified += 1
    return result


def _against_feedback(grade: GradeApplied, candidates: list[Feedback]) -> list[str]:
    if not candidates:
        return ["no feedback record with its request and feedback id"]
    said = [(f.source, f.grade, f.weight) for f in candidates]
    if (grade.source, grade.score, grade.weight) in said:
        return []
    source, score, weight = said[0]
    return [
        f"differs from its feedback: recorded {grade.source}/{grade.score}/{grade.weight}, "
        f"feedback {source}/{score}/{weight} (source/score/weight)"
    ]


def _against_answer(grade: GradeApplied, answer: tuple[str, str, str | None] | None) -> list[str]:
    if answer is None:
        return ["its request has no successful final attempt in the routing log"]
    route, deployment, context = answer
    if (grade.route, grade.deployment) != (route, deployment):
        return [f"answered by {deployment} on {route}, graded {grade.deployment} on {grade.route}"]
    if context is not None and grade.context != context:
        return [f"answered in context {context!r}, graded in {grade.context!r}"]
    return []


def _against_previous(grade: GradeApplied, previous: GradeApplied | None) -> list[str]:
    expected = (None, None) if previous is None else (previous.score, previous.weight)
    if (grade.replaces_score, grade.replaces_weight) != expected:
        return [
            f"replaces {grade.replaces_score}/{grade.replaces_weight}, "
            f"the grade in force was {expected[0]}/{expected[1]}"
        ]
    return []


# --------------------------------------------------------------------------- audit

#: Grades listed one by one per decision (the rest are counted).
LISTED = 20


def _grade_json(grade: GradeApplied, offset: int) -> dict[str, Any]:
    return {
        "routing_offset": offset,
        "request_id": grade.request_id,
        "deployment": grade.deployment,
        "context": grade.context,
        "source": grade.source,
        "score": grade.score,
        "weight": grade.weight,
        "replaces_score": grade.replaces_score,
        "replaces_weight": grade.replaces_weight,
        "feedback_id": grade.feedback_id,
    }


def grades_of(log: RecordedLog, request_id: str) -> list[dict[str, Any]]:
    """The grades applied to this request's answer, in routing-log order."""
    return [
        _grade_json(entry.event, entry.offset)
        for entry in log.routing
        if isinstance(entry.event, GradeApplied) and entry.event.request_id == request_id
    ]


def grades_before(log: RecordedLog, decision: Decision) -> dict[str, Any]:
    """The grades the route folded for the decision's candidates since the route's previous
    recorded decision, up to the event this decision was made at: what moved it."""
    previous = max(
        (
            d.state_version
            for d in events(log.decisions)
            if d.route == decision.route and d.state_version < decision.state_version
        ),
        default=-1,
    )
    deployments = {c.deployment for c in decision.candidates} | {decision.deployment}
    folded = [
        _grade_json(entry.event, entry.offset)
        for entry in log.routing
        if isinstance(entry.event, GradeApplied)
        and entry.event.route == decision.route
        and entry.event.deployment in deployments
        and previous < entry.offset <= decision.state_version
    ]
    per_deployment: dict[str, dict[str, float]] = {}
    for grade in folded:
        totals = per_deployment.setdefault(grade["deployment"], {"grades": 0, "score_sum": 0.0})
        totals["grades"] += 1
        totals["score_sum"] += grade["score"]
    return {
        "since_routing_offset": previous + 1,
        "count": len(folded),
        "per_deployment": {
            name: {"grades": int(t["grades"]), "mean_score": t["score_sum"] / t["grades"]}
            for name, t in sorted(per_deployment.items())
        },
        "listed": folded[:LISTED],
    }
