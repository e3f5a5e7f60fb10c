"""Feedback: validation and dead letters, matching to the answer, the
replacement rule, duplicates, unmatched feedback and the early-feedback race."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from factories import T0, dep, outcome

from app.contract import (
    DeadLetter,
    Feedback,
    FeedbackAccepted,
    LogPosition,
    StatusClass,
)
from app.grades.intake import accept_feedback
from app.grades.matching import (
    MAX_GRADES,
    AnswerRow,
    MatchStep,
    grade_id,
    on_feedback,
    on_outcome,
    on_sweep,
)

WHERE = LogPosition(topic="llm.feedback", partition=1, offset=7)
WHEN = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WINDOW, GRACE = 3600.0, 60.0
GOOD = dep("good-x")


def run(raw: bytes | None) -> FeedbackAccepted | DeadLetter:
    return accept_feedback(raw, WHERE, WHEN, max_bytes=2048, deadletter_max_bytes=64)


def body(**fields: Any) -> bytes:
    return json.dumps({"request_id": "r1", "source": "user", **fields}).encode()


def feedback(score: float | None = None, label: str | None = None, **fields: Any) -> Feedback:
    data: dict[str, Any] = {"request_id": "r1", "source": "user", **fields}
    data.update({"score": score} if label is None else {"label": label})
    return Feedback.model_validate(data).with_id()


# --------------------------------------------------------------------------- validation


def test_a_score_is_accepted_and_unknown_fields_never_stored() -> None:
    result = run(body(score=0.75, comment="free text the user typed", weight=2))
    assert isinstance(result, FeedbackAccepted)
    assert result.feedback.grade == 0.75 and result.feedback.weight == 2.0
    assert result.source == WHERE and result.occurred_at == WHEN
    assert "free text" not in result.model_dump_json()


@pytest.mark.parametrize(
    ("label", "score"),
    [("thumbs_up", 1.0), ("thumbs_down", 0.0), ("accepted", 1.0), ("rejected", 0.0)],
)
def test_labels_map_to_scores(label: str, score: float) -> None:
    result = run(body(label=label))
    assert isinstance(result, FeedbackAccepted) and result.feedback.grade == score


def test_a_re_send_is_the_same_feedback() -> None:
    first, again, other = (
        run(body(label="thumbs_up")),
        run(body(label="thumbs_up")),
        run(body(score=1)),
    )
    assert isinstance(first, FeedbackAccepted) and isinstance(again, FeedbackAccepted)
    assert isinstance(other, FeedbackAccepted)
    assert first.feedback.feedback_id == again.feedback.feedback_id != other.feedback.feedback_id
    given = run(body(score=0.5, feedback_id="vote-9"))
    assert isinstance(given, FeedbackAccepted) and given.feedback.feedback_id == "vote-9"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "not_json"),
        (b"\xff\xfe", "not_json"),
        (b"[1]", "not_object"),
        (b"[" * 100 + b"]" * 100, "too_deep"),
        (body(score=float("nan")), "bad_number"),
        (b'{"request_id": "r", "source": "user", "score": 1' + b"0" * 200 + b"}", "bad_number"),
        (b'{"request_id": "\\ud800", "source": "user", "score": 1}', "bad_text"),
        (body(), "bad_feedback"),
        (body(score=1, label="thumbs_up"), "bad_feedback"),
        (body(score=1.5), "schema_violation"),
        (body(score="0.5"), "schema_violation"),
        (body(score=True), "schema_violation"),
        (body(label="meh"), "schema_violation"),
        (body(score=1, source="crowd"), "schema_violation"),
        (body(score=1, weight=0), "schema_violation"),
        (body(score=1, weight=1e9), "schema_violation"),
        (json.dumps({"source": "user", "score": 1}).encode(), "schema_violation"),
        (body(score=1, request_id="a\nb"), "schema_violation"),
        (body(score=1, pad="x" * 3000), "oversized"),
        (None, "not_json"),
    ],
)
def test_bad_feedback_is_dead_lettered_with_its_reason(raw: bytes | None, reason: str) -> None:
    result = run(raw)
    assert isinstance(result, DeadLetter), result
    assert result.reason == reason
    assert result.source == WHERE
    assert base64.b64decode(result.original_base64) == (raw or b"")[:64]


def test_a_schema_violation_never_quotes_the_input() -> None:
    result = run(body(score="secret words", request_id="r"))
    assert isinstance(result, DeadLetter) and "secret" not in result.detail


# --------------------------------------------------------------------------- matching


def answered(status: StatusClass = StatusClass.SUCCESS, *, final: bool = True) -> MatchStep:
    return on_outcome(None, outcome("r1", GOOD, status=status, final=final), T0, WINDOW)


def give(row: AnswerRow | None, fb: Feedback, when: float = T0 + 10) -> MatchStep:
    return on_feedback(row, fb, WHERE, when, window_s=WINDOW, grace_s=GRACE)


def test_feedback_on_an_ok_answer_becomes_one_grade_for_the_answering_deployment() -> None:
    row = answered().row
    step = give(row, feedback(label="thumbs_up"))
    [grade] = step.grades
    assert (grade.request_id, grade.route, grade.deployment, grade.source) == (
        "r1",
        "chat",
        GOOD,
        "user",
    )
    assert grade.score == 1.0 and grade.weight == 1.0 and grade.replaces_score is None
    assert grade.id == grade_id("r1", str(grade.feedback_id))
    assert grade.occurred_at.timestamp() == T0 + 10
    assert step.write == "set" and step.results == ["graded"]


def test_a_non_final_outcome_does_not_answer() -> None:
    assert answered(final=False).write == "keep"


def test_a_duplicate_feedback_id_is_dropped() -> None:
    first = give(answered().row, feedback(label="thumbs_up"))
    again = give(first.row, feedback(label="thumbs_up"))
    assert not again.grades and again.write == "keep" and again.results == ["duplicate"]


def test_a_second_grade_from_the_same_source_replaces_the_first() -> None:
    first = give(answered().row, feedback(score=0.2))
    second = give(first.row, feedback(score=0.9))
    [grade] = second.grades
    assert (grade.score, grade.replaces_score, grade.replaces_weight) == (0.9, 0.2, 1.0)
    assert second.results == ["replaced"]
    third = give(second.row, feedback(score=0.4, weight=3.0))
    assert (third.grades[0].replaces_score, third.grades[0].weight) == (0.9, 3.0)


def test_a_grade_from_another_source_adds() -> None:
    first = give(answered().row, feedback(score=0.2))
    judge = give(first.row, feedback(score=0.8, source="judge"))
    [grade] = judge.grades
    assert grade.source == "judge" and grade.replaces_score is None
    assert set(judge.row.grades) == {"user", "judge"}  # type: ignore[union-attr]


def test_grades_per_request_are_bounded() -> None:
    row = answered().row
    for n in range(MAX_GRADES):
        row = give(row, feedback(score=n / 100)).row
    step = give(row, feedback(score=0.99))
    assert not step.grades and step.unmatched[0].why == "grade_limit"


def test_feedback_on_an_error_answer_is_unmatched() -> None:
    step = give(answered(StatusClass.SERVER_ERROR).row, feedback(score=1))
    assert not step.grades and [u.why for u in step.unmatched] == ["not_ok"]
    assert step.results == ["unmatched_not_ok"] and step.write == "keep"


def test_feedback_after_the_window_is_unmatched() -> None:
    step = give(answered().row, feedback(score=1), when=T0 + WINDOW + 1)
    assert not step.grades and step.unmatched[0].why == "expired"


def test_feedback_before_its_outcome_waits_and_is_matched_when_it_comes() -> None:
    waiting = give(None, feedback(score=0.3), when=T0 - 5)
    assert waiting.results == ["pending"] and waiting.row is not None
    assert waiting.row.expires_at == T0 - 5 + GRACE
    assert give(waiting.row, feedback(score=0.3)).results == ["duplicate"]
    step = on_outcome(waiting.row, outcome("r1", GOOD), T0, WINDOW)
    [grade] = step.grades
    assert grade.deployment == GOOD and grade.score == 0.3
    assert step.row is not None and step.row.waiting == [] and step.row.expires_at == T0 + WINDOW


def test_feedback_for_a_request_never_answered_is_unmatched_after_the_grace() -> None:
    waiting = give(None, feedback(score=0.3), when=T0)
    assert waiting.row is not None
    assert on_sweep(waiting.row, T0 + GRACE - 1).write == "keep"
    swept = on_sweep(waiting.row, T0 + GRACE)
    assert swept.write == "delete" and [u.why for u in swept.unmatched] == ["unknown_request"]


def test_an_answered_row_is_pruned_after_the_window_without_noise() -> None:
    row = give(answered().row, feedback(score=1)).row
    assert row is not None
    swept = on_sweep(row, T0 + WINDOW)
    assert swept.write == "delete" and not swept.unmatched


def test_a_second_final_outcome_changes_nothing() -> None:
    row = give(answered().row, feedback(score=1)).row
    again = on_outcome(row, outcome("r1", dep("other-x")), T0 + 1, WINDOW)
    assert again.write == "keep" and again.row == row


def test_the_row_and_grades_carry_no_free_text() -> None:
    accepted = run(body(score=0.5, note="the secret note"))
    assert isinstance(accepted, FeedbackAccepted)
    step = give(answered().row, accepted.feedback)
    assert "secret" not in step.row.model_dump_json()  # type: ignore[union-attr]
    assert "secret" not in step.grades[0].model_dump_json()
