"""Feedback: a quality grade of one answer, as published to ``llm.feedback``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.contract.base import Envelope, GradeSource, LogPosition, derived_id

FeedbackLabel = Literal["thumbs_up", "thumbs_down", "accepted", "rejected"]
#: What a label means as a score in [0, 1].
LABEL_SCORES: dict[str, float] = {
    "thumbs_up": 1.0,
    "thumbs_down": 0.0,
    "accepted": 1.0,
    "rejected": 0.0,
}
#: Bounds of a grade's weight (GradeApplied's too).
MAX_GRADE_WEIGHT = 100.0
_Id = Annotated[str, Field(min_length=1, max_length=200)]


class Feedback(BaseModel):
    """A quality grade of one answer, on ``llm.feedback``. Unknown fields are
    ignored and never stored: no free text goes further than this model.

    Exactly one of ``score`` (in [0, 1]) and ``label``. ``feedback_id`` defaults to
    one derived from the request id, source and score or label, so a re-send is the
    same feedback. ``occurred_at`` is informational: matching uses log time.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    request_id: _Id
    score: Annotated[float, Field(ge=0.0, le=1.0, strict=True)] | None = None
    label: FeedbackLabel | None = None
    source: GradeSource
    weight: Annotated[float, Field(gt=0.0, le=MAX_GRADE_WEIGHT, strict=True)] = 1.0
    feedback_id: _Id | None = None
    occurred_at: datetime | None = None

    @field_validator("request_id", "feedback_id")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("ids must be printable")
        return value

    @model_validator(mode="after")
    def _one_grade(self) -> Feedback:
        if (self.score is None) == (self.label is None):
            raise ValueError("exactly one of score and label")
        return self

    @property
    def grade(self) -> float:
        """The score, or the label's score."""
        return self.score if self.score is not None else LABEL_SCORES[str(self.label)]

    def with_id(self) -> Feedback:
        """This feedback with its ``feedback_id`` filled in (derived when absent)."""
        if self.feedback_id is not None:
            return self
        what = self.label if self.label is not None else repr(self.score)
        derived = derived_id("feedback", self.request_id, self.source, what)
        return self.model_copy(update={"feedback_id": derived})


class FeedbackAccepted(Envelope):
    """Internal: a valid feedback, re-keyed by request id onto the matching topic."""

    type: Literal["feedback.accepted"] = "feedback.accepted"
    feedback: Feedback
    #: Where it was on ``llm.feedback``.
    source: LogPosition


class FeedbackSweep(Envelope):
    """Internal: time passing on one partition of the matching topic (prunes the table)."""

    type: Literal["feedback.sweep"] = "feedback.sweep"
    partition: int
