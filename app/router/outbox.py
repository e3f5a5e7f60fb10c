"""What one folded step sends: decisions and dispatches, routing-log records, responses."""

from __future__ import annotations

import asyncio
from typing import Any

from app import metrics
from app.contract import Decision, route_of
from app.router.ports import Outbox
from app.routing.steps import KeyStep
from app.worker.transactions import Sender


async def publish(
    step: KeyStep, out: Outbox, send: Sender, answered: str | None = None
) -> list[asyncio.Future[Any]]:
    """Send the step's records and start its calls; return the records' delivery futures.

    ``send``: to the broker now, or into the partition's transaction (exactly-once).
    ``answered``: the request whose successful answer the executor already published
    (the feedback said so): the fold derives the same record, not sent again.
    """
    pending: list[asyncio.Future[Any]] = []
    for dispatch in step.dispatches:
        decision = dispatch.decision
        key = decision.request_id.encode()
        pending.append(await send(out.decisions, key, decision.model_dump_json(), None))
        pending.append(await out.hand_off(dispatch, send))
        metrics.BANDIT_CHOICE.labels(provider=decision.provider, strategy=decision.strategy).inc()
        metrics.DECISIONS_BY_DOMAIN.labels(
            domain=decision.domain or "none", candidate_filter=decision.candidate_filter
        ).inc()
    for decision in step.decisions:  # answered from the response cache: no call
        key = decision.request_id.encode()
        pending.append(await send(out.decisions, key, decision.model_dump_json(), None))
        metrics.CACHE_HITS.labels(route=decision.route, kind=_cache_kind(decision)).inc()
    for record in step.records:  # budget asks, verdicts, settlements
        key = route_of(record).encode()
        pending.append(await send(out.routing_log, key, record.model_dump_json(), None))
    for response in step.responses:
        if response.request_id == answered and response.status == "ok":
            continue
        key = response.request_id.encode()
        pending.append(await send(out.responses, key, response.model_dump_json(), None))
        out.reply(response)
        await out.answered(response)
        metrics.RESPONSES.labels(status=response.status, source="router").inc()
        if response.error is not None and response.attempts == 0 and response.error.code:
            metrics.REFUSALS.labels(code=response.error.code).inc()
    return pending


def _cache_kind(decision: Decision) -> str:
    return decision.cache.kind if decision.cache is not None else "exact"
