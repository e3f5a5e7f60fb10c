"""The built-in judge (issue 10 §6): ask for a grade, read the grade, publish it as feedback.

* :func:`request_judgement` runs in the executor right after it published a successful
  answer: when the route has a judge and the answer is sampled (:mod:`app.judge`), the
  judge request goes to ``llm.requests``, where it is accepted, routed (pinned to the
  judge deployment), called, recorded and answered like any other request.
* ``judge_answers`` reads ``llm.responses``, keeps the answers of judge requests (their
  key starts with ``judge-``; the rest are skipped unread) and publishes each score as a
  ``Feedback`` (``source: judge``) on ``llm.feedback`` for the parent request, which the
  feedback intake and matcher (agents/feedback.py) apply like any grade. A failed, late
  or unparseable judge call publishes nothing. A response read twice (at-least-once)
  gives the same feedback id, which the matcher counts once.

Neither step ever holds up or fails an answer: an error in either is logged (its type,
never the content) and counted in ``switchyard_judge_total{result="error"}``.
"""

from __future__ import annotations

import logging

from aiokafka.errors import KafkaError
from faust import StreamT

from agents.app import app, requests_topic, responses_topic
from agents.feedback import feedback_topic
from app import metrics
from app.events import Dispatch, Response
from app.judge import JUDGE_PREFIX, judge_deployments, judge_feedback, judge_of, plan_judgement
from app.runtime import policy_holder

log = logging.getLogger(__name__)
_JUDGE_KEY = JUDGE_PREFIX.encode()


async def request_judgement(dispatch: Dispatch, response: Response | None) -> None:
    """Publish the judge request for this answer when its route's judge samples it."""
    if response is None or response.status != "ok":
        return
    decision = dispatch.decision
    try:
        judge = judge_of(policy_holder().current.config, decision.route)
        if judge is None:
            return
        request = dispatch.accepted.request
        plan = plan_judgement(judge, request, decision.deployment, response.completion or {})
        if plan.request is not None:
            value = plan.request.model_dump_json(exclude_none=True)
            await requests_topic.send(key=plan.request.request_id.encode(), value=value)
        result = plan.result
    except Exception as exc:  # judging is optional: the answer is out already
        log.warning("judge request for %s not sent: %s", decision.request_id, type(exc).__name__)
        result = "error"
    metrics.JUDGE.labels(result=result).inc()


@app.agent(responses_topic)
async def judge_answers(stream: StreamT[bytes]) -> None:
    async for event in stream.events():
        if (event.key or b"").startswith(_JUDGE_KEY):
            await read_judgement(event.value)


async def read_judgement(raw: bytes | None) -> None:
    """One judge answer: its score as feedback, or nothing. Raises only for the broker."""
    try:
        response = Response.model_validate_json(raw or b"")
        judges = judge_deployments(policy_holder().current.config)
        result, feedback = judge_feedback(response, judges)
        if feedback is not None:
            value = feedback.model_dump_json(exclude_none=True)
            await feedback_topic.send(key=feedback.request_id.encode(), value=value)
    except Exception as exc:
        if isinstance(exc, KafkaError):
            raise
        log.warning("judge answer not read: %s", type(exc).__name__)
        result = "error"
    metrics.JUDGE.labels(result=result).inc()
