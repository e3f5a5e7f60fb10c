"""Every event type by name: the public topics' and the internal ones' (their JSON
Schemas in ``schemas/`` are generated from these: ``switchyard schemas``)."""

from __future__ import annotations

from pydantic import BaseModel

from app.contract.answer import DeadLetter, Response
from app.contract.budget import BudgetAsk, BudgetSettle, BudgetVerdict
from app.contract.decision import Decision
from app.contract.dispatch import Dispatch
from app.contract.feedback import Feedback, FeedbackAccepted, FeedbackSweep
from app.contract.outcome import Outcome
from app.contract.policy import PolicyChanged, PolicyProposed
from app.contract.request import ChatRequest
from app.contract.routing_log import AttemptFinished, GradeApplied, RequestAccepted, RouteTick
from app.contract.stream import StreamDelta

PUBLIC_EVENTS: dict[str, type[BaseModel]] = {
    "chat_request": ChatRequest,
    "decision": Decision,
    "outcome": Outcome,
    "response": Response,
    "deadletter": DeadLetter,
    "feedback": Feedback,
    "policy_proposed": PolicyProposed,
}
INTERNAL_EVENTS: dict[str, type[BaseModel]] = {
    "request_accepted": RequestAccepted,
    "attempt_finished": AttemptFinished,
    "dispatch": Dispatch,
    "route_tick": RouteTick,
    "grade_applied": GradeApplied,
    "feedback_accepted": FeedbackAccepted,
    "feedback_sweep": FeedbackSweep,
    "policy_changed": PolicyChanged,
    "budget_ask": BudgetAsk,
    "budget_verdict": BudgetVerdict,
    "budget_settle": BudgetSettle,
    "stream_delta": StreamDelta,
}
