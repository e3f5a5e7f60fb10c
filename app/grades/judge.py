"""The built-in judge, pure: which answers are graded, the judge's request,
and the score read from its answer.

A route with ``judge: {deployment, sample_rate, rubric, allow_self}`` has a share of
its successful final answers graded by a pinned deployment. The grading is an ordinary
request on ``llm.requests`` (routed, recorded, billed and replayable like any other):

* **who is graded** (:func:`plan_judgement`): a successful answer of a route with a
  judge, sampled deterministically from its request id (the same answer is sampled the
  same way on every worker and after a crash); never a judge request itself (its
  ``metadata.purpose`` or its id), never an answer of the judge's own deployment unless
  ``allow_self``;
* **the judge request**: id ``judge-<parent id>`` (a re-sent answer derives the same
  request), ``model`` = the judge's ``provider:model`` (a pin: no fallback),
  ``metadata`` = ``{"purpose": "judge", "parent_request_id": ...}``, temperature 0, and
  two messages: the rubric with the reply format (a system message starting with
  :data:`JUDGE_MARKER`), then the question (the text of the parent's messages, by role)
  and the answer (the text of its first choice). The parent's tenant and data rules
  (``provider.regions``, ``zdr``, ``data_collection``) go along: the judge reads the
  parent's data, so the same rules bind it, and a judge deployment they forbid is
  refused (the answer is then not graded). Nothing else of the parent goes along: no
  session, metadata, provider lists, tool calls or usage;
* **the score** (:func:`parse_score`): the judge's reply must hold exactly one line
  ``SCORE: <number>`` with the number in [0, 1]; anything else is no score. A judge
  answer becomes a ``Feedback`` (``source: judge``, ``feedback_id`` derived from the
  parent id) only with a score; a failed, late or unparseable judge call gives nothing.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.config.schema import JudgeConfig, RoutingConfig
from app.contract import (
    ChatMessage,
    ChatRequest,
    Feedback,
    ProviderPreferences,
    Response,
    derived_id,
)
from app.routing.bandit import seeded_rng

#: Request ids of judge requests start with this; the rest is the parent's id.
JUDGE_PREFIX = "judge-"
#: The judge's system message starts with this (simulated providers answer it with a score).
JUDGE_MARKER = "[switchyard-judge]"
PURPOSE = "judge"
#: Longest question + answer text a judge is asked about (beyond: not judged).
MAX_JUDGE_TEXT_CHARS = 100_000
_MAX_ID = 200
REPLY_FORMAT = (
    "Grade the answer to the question below against the rubric. Reply with exactly one "
    "line `SCORE: <number>`, the number between 0 (worst) and 1 (best), and nothing else."
)
_SCORE_LINE = re.compile(r"^[ \t]*SCORE[ \t]*:[ \t]*([0-9]+(?:\.[0-9]+)?)[ \t]*$", re.M | re.I)


@dataclass(frozen=True, slots=True)
class JudgePlan:
    """What to do about one answer: ``result`` for the metric, the request when sampled."""

    result: str
    request: ChatRequest | None = None


def judge_request_id(parent_id: str) -> str | None:
    """``judge-<parent>``, or None when that would be longer than a request id may be."""
    derived = JUDGE_PREFIX + parent_id
    return derived if len(derived) <= _MAX_ID else None


def parent_of(request_id: str) -> str | None:
    """The graded request's id, when ``request_id`` is a judge request's."""
    if request_id.startswith(JUDGE_PREFIX) and len(request_id) > len(JUDGE_PREFIX):
        return request_id[len(JUDGE_PREFIX) :]
    return None


def is_judge_request(request: ChatRequest) -> bool:
    return request.metadata.get("purpose") == PURPOSE or parent_of(request.request_id) is not None


def sampled(request_id: str, sample_rate: float) -> bool:
    """Deterministic per request id: the same answer is sampled alike everywhere."""
    if sample_rate <= 0.0:
        return False
    return sample_rate >= 1.0 or seeded_rng("judge", request_id).random() < sample_rate


def judge_of(config: RoutingConfig, route: str) -> JudgeConfig | None:
    route_config = config.routes.get(route)
    return route_config.judge if route_config is not None else None


def judge_deployments(config: RoutingConfig) -> frozenset[str]:
    """Every deployment some route uses as its judge."""
    return frozenset(r.judge.deployment for r in config.routes.values() if r.judge is not None)


def plan_judgement(
    judge: JudgeConfig, request: ChatRequest, deployment: str, completion: Mapping[str, Any]
) -> JudgePlan:
    """Whether the answer ``deployment`` gave to ``request`` is graded, and how."""
    if is_judge_request(request):
        return JudgePlan("judge_request")
    if request.is_embeddings:  # vectors: nothing a rubric can grade
        return JudgePlan("embeddings")
    if deployment == judge.deployment and not judge.allow_self:
        return JudgePlan("self")
    if not sampled(request.request_id, judge.sample_rate):
        return JudgePlan("not_sampled")
    request_id = judge_request_id(request.request_id)
    if request_id is None:
        return JudgePlan("id_too_long")
    answer = answer_text(completion)
    if not answer:
        return JudgePlan("no_answer")
    question = transcript(request.messages)
    if len(question) + len(answer) > MAX_JUDGE_TEXT_CHARS:
        return JudgePlan("too_large")
    messages = judge_messages(judge.rubric, question, answer)
    return JudgePlan("requested", build_request(judge, request_id, request, messages))


def judge_messages(rubric: str, question: str, answer: str) -> list[ChatMessage]:
    system = f"{JUDGE_MARKER} {REPLY_FORMAT}\n\nRubric:\n{rubric}"
    user = f"Question:\n{question}\n\nAnswer:\n{answer}"
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]


def build_request(
    judge: JudgeConfig, request_id: str, parent: ChatRequest, messages: list[ChatMessage]
) -> ChatRequest:
    asked = parent.provider
    rules = None
    if asked is not None and (
        asked.regions is not None or asked.zdr or asked.data_collection != "allow"
    ):
        rules = ProviderPreferences(
            regions=asked.regions, zdr=asked.zdr, data_collection=asked.data_collection
        )
    return ChatRequest(
        request_id=request_id,
        model=judge.deployment,
        messages=messages,
        temperature=0.0,
        metadata={"purpose": PURPOSE, "parent_request_id": parent.request_id},
        tenant=parent.tenant,
        provider=rules,
    )


def message_text(content: object) -> str:
    """A message's text: a string, or the text parts of a content list (images dropped)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = (p.get("text") for p in content if isinstance(p, Mapping))
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def transcript(messages: Iterable[ChatMessage]) -> str:
    """``role: text`` per message with text; tool calls, names and images stay out."""
    lines = (f"{m.role}: {text}" for m in messages if (text := message_text(m.content)))
    return "\n".join(lines)


def answer_text(completion: Mapping[str, Any] | None) -> str:
    """The text of a completion's first choice ('' when it has none)."""
    choices = (completion or {}).get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return ""
    message = choices[0].get("message")
    return message_text(message.get("content")) if isinstance(message, Mapping) else ""


def parse_score(text: object) -> float | None:
    """The score of a judge's reply: exactly one ``SCORE: x`` line, 0 ≤ x ≤ 1; else None."""
    if not isinstance(text, str):
        return None
    found = _SCORE_LINE.findall(text)
    if len(found) != 1:
        return None
    value = float(found[0])
    return value if 0.0 <= value <= 1.0 else None


def judge_feedback(response: Response, judges: Collection[str]) -> tuple[str, Feedback | None]:
    """(result for the metric, the grade to publish) for one response on ``llm.responses``.

    ``not_judge``: not a judge request's answer, or answered by no configured judge;
    ``late``: the judge call ran out of the request's time; ``failed``: any other error;
    ``unparseable``: no score in the reply; ``scored``: the grade, on the parent request.
    """
    parent = parent_of(response.request_id)
    if parent is None:
        return "not_judge", None
    if response.status != "ok":
        code = response.error.code if response.error is not None else None
        return ("late" if code == "deadline_exceeded" else "failed"), None
    if response.deployment not in judges:
        return "not_judge", None
    score = parse_score(answer_text(response.completion))
    if score is None:
        return "unparseable", None
    feedback = Feedback(
        request_id=parent,
        score=score,
        source="judge",
        feedback_id=derived_id("judge", parent),
    )
    return "scored", feedback
