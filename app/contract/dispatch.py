"""The dispatch: a decision with the request it routes, for the executors (internal)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.contract.base import Envelope
from app.contract.decision import Decision
from app.contract.routing_log import RequestAccepted


class Dispatch(Envelope):
    """Internal: a decision plus the request it routes, for the executors."""

    type: Literal["attempt.dispatch"] = "attempt.dispatch"
    decision: Decision
    accepted: RequestAccepted
    timeout_s: float
    max_attempts: int
    #: Epoch seconds: backoff before a retry; the executor does not call before it.
    not_before: float = 0.0
    #: Epoch seconds after which the request is no longer worth answering.
    deadline: float
    #: Deployments tried by earlier attempts of this request.
    tried: list[str] = Field(default_factory=list)
    #: Local-first attempt: keep the answer only at this confidence or above.
    min_confidence: float | None = None
