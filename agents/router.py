"""Router: the single writer of a route's state. Folds the routing log in order.

Read the row, call :func:`app.routing.fold.handle`, send what it produced and
wait until the broker has it, then write the row. Nothing else.

The order matters. The row write lands in the local store at once and is what
makes a redelivered event a no-op (its position is in the row). Written before
the sends were acknowledged, a SIGKILL in between left a row that had applied
the event and sends that never reached the broker: the redelivered event was
skipped, and its response (or dispatch) was gone for good. Written after, a kill
before the write re-folds the event from the same row on redelivery and sends
the same derived-id records again (consumers drop duplicates by id).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from datetime import UTC, datetime

from faust import StreamT
from faust.types import EventT
from pydantic import TypeAdapter, ValidationError

from agents.ingest import log_time, position_of
from app import metrics
from app.events import RouteTick, RoutingLogEvent, derived_id, route_of
from app.faust_app import (
    app,
    deadletter_topic,
    decisions_topic,
    dispatch_topic,
    responses_topic,
    routing_topic,
    settings,
)
from app.ingest import dead_letter
from app.routing.fold import Step, handle
from app.routing.state import BREAKER_GAUGE
from app.runtime import policy_holder
from tables.routing import load_route_state, save_route_state

log = logging.getLogger(__name__)
_routing_event: TypeAdapter[RoutingLogEvent] = TypeAdapter(RoutingLogEvent)


@app.agent(routing_topic)
async def route(stream: StreamT[bytes]) -> None:
    async for event in stream.events():
        try:
            parsed = _routing_event.validate_json(event.value)
        except ValidationError as exc:
            await _dead_letter(event, f"unreadable routing-log event: {exc.error_count()} error(s)")
            continue
        try:
            await _fold(parsed, event.message.offset)
        except Exception as exc:  # a bug must not stop the route: record it and go on
            log.exception("router failed on %s", position_of(event))
            await _dead_letter(event, f"router error: {type(exc).__name__}")


async def _fold(parsed: RoutingLogEvent, offset: int) -> None:
    route_name = route_of(parsed)
    started = time.perf_counter()
    step = handle(load_route_state(route_name), parsed, offset, policy_holder().current)
    metrics.DECISION_SECONDS.observe(time.perf_counter() - started)
    await _publish(step)  # acknowledged by the broker before the row says "done"
    save_route_state(route_name, step.state)
    metrics.ROUTER_EVENTS.labels(type=parsed.type, applied=str(step.applied)).inc()
    _export_breakers(step)


async def _dead_letter(event: EventT[bytes], detail: str) -> None:
    letter = dead_letter(
        "internal",
        detail,
        event.value or b"",
        position_of(event),
        log_time(event),
        settings.deadletter_max_bytes,
    )
    await deadletter_topic.send(key=letter.id.encode(), value=letter.model_dump_json())


async def _publish(step: Step) -> None:
    """Send the step's records and wait until the broker acknowledged every one."""
    pending: list[Awaitable[object]] = []
    for dispatch in step.dispatches:
        decision = dispatch.decision
        key = decision.request_id.encode()
        pending.append(await decisions_topic.send(key=key, value=decision.model_dump_json()))
        pending.append(await dispatch_topic.send(key=key, value=dispatch.model_dump_json()))
        metrics.BANDIT_CHOICE.labels(provider=decision.provider, strategy=decision.strategy).inc()
        metrics.DECISIONS_BY_DOMAIN.labels(
            domain=decision.domain or "none", candidate_filter=decision.candidate_filter
        ).inc()
    for response in step.responses:
        sent = await responses_topic.send(
            key=response.request_id.encode(), value=response.model_dump_json()
        )
        pending.append(sent)
        metrics.RESPONSES.labels(status=response.status, source="router").inc()
        if response.error is not None and response.attempts == 0 and response.error.code:
            metrics.REFUSALS.labels(code=response.error.code).inc()
    if pending:
        await asyncio.gather(*pending)


def _export_breakers(step: Step) -> None:
    for deployment, arm in step.state.arms.items():
        provider = deployment.split(":", 1)[0]
        metrics.CIRCUIT_BREAKER_STATE.labels(provider=provider).set(
            BREAKER_GAUGE[arm.breaker.state]
        )


@app.timer(interval=settings.tick_interval_s)  # type: ignore[untyped-decorator]
async def tick_routes() -> None:
    """Publish the time on every configured route; the router expires lost attempts with it."""
    now = datetime.now(UTC)
    for route_name in policy_holder().current.config.route_names():
        tick = RouteTick(
            id=derived_id("tick", route_name, now.isoformat()), occurred_at=now, route=route_name
        )
        await routing_topic.send(key=route_name.encode(), value=tick.model_dump_json())
