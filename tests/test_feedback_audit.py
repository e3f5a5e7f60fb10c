"""Replay and audit of a log with grades: grades are re-folded, checked
against their feedback and answer (tampering with either is caught), and the audit
shows the grades applied to an answer and those folded before a decision."""

from __future__ import annotations

import json
from typing import Any

from factories import T0, accepted, at, dep, finish, policy, provider

from app.audit.explain import build_trace
from app.audit.explain import render as render_trace
from app.audit.log import RecordedLog, parse
from app.audit.replay import rederive, render, replay
from app.contract import Feedback, GradeApplied, RoutingLogEvent
from app.grades.matching import grade_id

POLICY = policy(provider("alpha-x"), provider("beta-x"))


def feedback(request_id: str, score: float, **fields: Any) -> Feedback:
    data = {"request_id": request_id, "source": "user", "score": score, **fields}
    return Feedback.model_validate(data).with_id()


def grade(fb: Feedback, deployment: str, replaces: float | None = None) -> GradeApplied:
    return GradeApplied(
        id=grade_id(fb.request_id, str(fb.feedback_id)),
        occurred_at=at(T0 + 5),
        request_id=fb.request_id,
        route="chat",
        deployment=deployment,
        source=fb.source,
        score=fb.grade,
        weight=fb.weight,
        feedback_id=str(fb.feedback_id),
        replaces_score=replaces,
        replaces_weight=None if replaces is None else 1.0,
    )


def recorded_log(events: list[RoutingLogEvent], feedbacks: list[Feedback]) -> RecordedLog:
    """The log a live worker would have recorded for these routing-log events."""
    routing = [parse("routing", 0, n, e.model_dump_json()) for n, e in enumerate(events)]
    again = rederive(routing, POLICY)
    return RecordedLog(
        "test",
        routing,
        [parse("decisions", 0, n, d.model_dump_json()) for n, d in enumerate(again.decisions)],
        [],
        [parse("responses", 0, n, r.model_dump_json()) for n, r in enumerate(again.responses)],
        [
            parse("feedback", 0, n, json.dumps(f.model_dump(mode="json")))
            for n, f in enumerate(feedbacks)
        ],
    )


def answered_then_graded() -> tuple[list[RoutingLogEvent], list[Feedback], str]:
    first = rederive([parse("routing", 0, 0, accepted("r1").model_dump_json())], POLICY)
    deployment = first.decisions[0].deployment
    up, down = feedback("r1", 1.0), feedback("r1", 0.25)
    events: list[RoutingLogEvent] = [
        accepted("r1"),
        finish("r1", deployment, T0 + 1),
        grade(up, deployment),
        grade(down, deployment, replaces=1.0),
        accepted("r2", T0 + 6),
    ]
    return events, [up, down], deployment


def test_a_log_with_grades_replays_and_every_grade_is_backed() -> None:
    events, feedbacks, _ = answered_then_graded()
    report = replay(recorded_log(events, feedbacks), POLICY)
    assert report.ok and report.mismatched == 0 and report.reproduced == 2
    assert report.grades.to_json() == {"recorded": 2, "verified": 2, "problems": []}
    assert "grades: 2, backed by their feedback and answer: 2" in render(report)


def test_a_grade_re_sent_after_a_crash_counts_once() -> None:
    events, feedbacks, _ = answered_then_graded()
    report = replay(recorded_log([*events[:3], events[2], *events[3:]], feedbacks), POLICY)
    assert report.ok and report.grades.recorded == 2


def test_an_altered_grade_is_caught() -> None:
    events, feedbacks, _ = answered_then_graded()
    forged = events[2]
    assert isinstance(forged, GradeApplied)
    events[2] = forged.model_copy(update={"score": 0.0})
    report = replay(recorded_log(events, feedbacks), POLICY)
    # The altered grade, and the next one, which replaces what the feedback said.
    assert not report.ok and report.grades.verified == 0
    assert "differs from its feedback" in report.grades.problems[0]
    assert "the grade in force was 0.0/1.0" in report.grades.problems[1]
    assert "FAILED" in render(report)


def test_an_altered_feedback_record_is_caught() -> None:
    events, feedbacks, _ = answered_then_graded()
    feedbacks[1] = feedbacks[1].model_copy(update={"score": 0.75})
    report = replay(recorded_log(events, feedbacks), POLICY)
    assert not report.ok and "differs from its feedback" in report.grades.problems[0]


def test_a_grade_without_feedback_or_on_the_wrong_deployment_is_caught() -> None:
    events, feedbacks, deployment = answered_then_graded()
    other = dep("beta-x") if deployment == dep("alpha-x") else dep("alpha-x")
    events[2] = grade(feedbacks[0], other)
    report = replay(recorded_log(events, feedbacks[1:]), POLICY)
    problems = " | ".join(report.grades.problems)
    assert "no feedback record" in problems and f"graded {other}" in problems


def test_audit_shows_the_grades_of_an_answer_and_those_before_a_decision() -> None:
    events, feedbacks, deployment = answered_then_graded()
    log = recorded_log(events, feedbacks)
    first = build_trace(log, "r1")
    assert first is not None
    assert [(g["score"], g["replaces_score"]) for g in first["grades"]] == [
        (1.0, None),
        (0.25, 1.0),
    ]
    assert "grades of this answer: 2" in render_trace(first)
    second = build_trace(log, "r2")
    assert second is not None and second["grades"] == []
    moved = second["attempts"][0]["decision"]["grades_before"]
    assert moved["count"] == 2 and moved["since_routing_offset"] == 1
    assert moved["per_deployment"] == {deployment: {"grades": 2, "mean_score": 0.625}}
    assert "grades folded since routing offset 1: 2" in render_trace(second)
