"""The built-in judge: ask for a grade, read the grade, publish it as feedback.

* :func:`request_judgement` runs in the executor right after it published a successful
  answer: when the route has a judge and the answer is sampled (:mod:`app.grades.judge`), the
  judge request goes to ``llm.requests``, where it is accepted, routed (pinned to the
  judge deployment), called, recorded and answered like any other request.
* :func:`read_judgement` runs where a judge request's answer is published: in the
  executor that got a successful answer (it publishes the score as a ``Feedback``,
  ``source: judge``, on ``llm.feedback`` for the parent request, which the feedback
  intake and matcher (agents/feedback.py) apply like any grade), and in the router for
  a failed or late one (counted, nothing published). No agent reads ``llm.responses``:
  a worker does not consume every answer to find the few that are grades. An answer
  published twice (at-least-once) gives the same feedback id, which the matcher counts
  once.

Neither step ever holds up or fails an answer: an error in either is logged (its type,
never the content) and counted in ``switchyard_judge_total{result="error"}``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from aiokafka.errors import KafkaError

from agents.app import requests_topic
from agents.feedback import feedback_topic
from app import metrics
from app.contract import Dispatch, Response
from app.grades.judge import (
    JUDGE_PREFIX,
    judge_deployments,
    judge_feedback,
    judge_of,
    plan_judgement,
)
from app.policy.holder import policy_holder

log = logging.getLogger(__name__)


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


async def read_judgement(response: Response) -> None:
    """A judge request's answer, where it is published: its score as feedback, or nothing.

    Returns once the broker has the feedback, so the executor's call counts as done
    (its hand-off record acked) only then. Raises only for the broker.
    """
    if not response.request_id.startswith(JUDGE_PREFIX):
        return
    try:
        judges = judge_deployments(policy_holder().current.config)
        result, feedback = judge_feedback(response, judges)
        if feedback is not None:
            value = feedback.model_dump_json(exclude_none=True)
            sent = await feedback_topic.send(key=feedback.request_id.encode(), value=value)
            await cast("asyncio.Future[Any]", sent)
    except Exception as exc:
        if isinstance(exc, KafkaError):
            raise
        log.warning("judge answer not read: %s", type(exc).__name__)
        result = "error"
    metrics.JUDGE.labels(result=result).inc()
