"""The gateway's state: config, keys, the producer to ``llm.requests``, the reply waiter.

The routing config (routes, aliases, auto blocks, dynamic routes) is the latest policy
version's on the policy topic (read at start and every ``POLICY_POLL_S``; the providers
file's until the first version exists), so ``switchyard policy apply`` and a rollback
reach SDK clients without a restart. The API keys are the gateway's own providers
file's: they never travel in the policy log.

:meth:`Gateway.prepare` turns an HTTP body into a checked ``llm.requests`` record with
ingest's own checks (``app.ingest.accept``), so a request ingest would dead-letter is
answered 400/404/413 at once instead of being published (a route or preset the gateway's
policy does not name is checked again, against the policy topic as it is when the request
is sent, before it is refused: a version applied since the last poll may add it);
:meth:`Gateway.submit`
publishes it, keyed by request id, and waits for the reply on the gateway's partition;
:meth:`Gateway.stream_items` does the same for a ``stream: true`` request and yields its
deltas and answer as they come (app/gateway/relay.py turns them into chunks).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from aiokafka import AIOKafkaProducer

from app.config.schema import GatewayKey, RoutingConfig
from app.contract import DeadLetter, LogPosition, ReplyTo, Response, StreamDelta
from app.gateway.errors import GatewayError, from_dead_letter, invalid, no_answer_in_time
from app.gateway.keys import KeyRing, check_route
from app.gateway.lookup import ResponseLookup
from app.gateway.resume import follow, not_found, owns
from app.gateway.translate import request_event
from app.gateway.waiter import ReplyWaiter
from app.ingest import POLICY_REFUSALS, accept
from app.kafka import DURABLE_PRODUCER, bootstrap_servers, client_security
from app.policy.log import PolicyFollower
from app.settings import Settings
from app.telemetry.http import stamp

log = logging.getLogger(__name__)

#: How often the gateway looks for a new policy version.
POLICY_POLL_S = 1.0
#: Beyond the request deadline, how long the router may take to answer a lost attempt.
ANSWER_GRACE_S = 15.0
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-")


#: Told where a published request's record is (its topic, partition and offset).
Sent = Callable[[LogPosition], None]


@dataclass(frozen=True)
class Recheck:
    """A request refused for a route or preset the gateway's policy does not name: checked
    again once the policy topic was read after ``since`` (``time.monotonic()``)."""

    since: float
    #: The check again: the request prepared, or the refusal raised.
    check: Callable[[], Prepared]


@dataclass(frozen=True)
class Prepared:
    request_id: str
    route: str
    value: bytes
    #: Not checked yet against the policy topic as it is now (see :class:`Recheck`).
    recheck: Recheck | None = None


def event_request_id(key: GatewayKey, asked: str | None) -> str:
    """The request id on the log: the client's (``x-switchyard-request-id``) or a fresh one,
    under the key's tenant, so one tenant can neither collide with nor read another's."""
    rid = asked if asked is not None else uuid.uuid4().hex
    if not rid or len(rid) > 128 or not set(rid) <= _ID_CHARS:
        raise invalid("x-switchyard-request-id: 1-128 of [A-Za-z0-9._:-]", "invalid_request_id")
    if key.tenant is None or rid.startswith(f"{key.tenant}."):
        return rid
    return f"{key.tenant}.{rid}"


class Gateway:
    def __init__(self, settings: Settings, config: RoutingConfig) -> None:
        self.settings = settings
        self.config = config
        self.keys = KeyRing.of(config)
        bootstrap = bootstrap_servers(settings.broker)
        self.reply_to = ReplyTo(
            topic=settings.topics.replies, partition=settings.gateway_reply_partitions[0]
        )
        self.waiter = ReplyWaiter(
            bootstrap,
            settings.topics.replies,
            settings.gateway_reply_partitions,
            settings.topics.deltas,
        )
        self.bootstrap = bootstrap
        self.lookup = ResponseLookup(
            bootstrap,
            settings.topics.responses,
            settings.gateway_lookup_window,
            requests_topic=settings.topics.requests,
        )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            linger_ms=settings.producer_linger_ms,
            max_request_size=settings.producer_max_request_size,
            **DURABLE_PRODUCER,
            **client_security(settings),
        )
        self._started = False
        #: The policy versions on the policy topic; the latest is in force here.
        self._policy = PolicyFollower(settings)
        self._following: asyncio.Task[None] | None = None
        #: The version in force (0: the providers file, no version read yet).
        self.policy_version = 0

    async def start(self) -> Gateway:
        await self._producer.start()
        await self.waiter.start()
        await self._adopt_new_versions()  # the version in force, if any yet
        self._following = asyncio.create_task(self._follow_policy(), name="gateway-policy")
        self._started = True
        return self

    async def stop(self) -> None:
        self._started = False
        if self._following is not None:
            self._following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._following
        await self.waiter.stop()
        await self._producer.stop()

    async def _follow_policy(self) -> None:
        """Follow the policy topic: the routes, aliases and auto blocks of each new
        version apply to the next request, as they do in ingest (no restart)."""
        while True:
            await asyncio.sleep(POLICY_POLL_S)
            try:
                await self._adopt_new_versions()
            except Exception as exc:  # the broker's trouble: the version in force stays
                log.warning("policy topic not read: %s", type(exc).__name__)

    async def _adopt_new_versions(self) -> None:
        await self._policy.refresh()
        self._use_latest()

    def _use_latest(self) -> None:
        latest = self._policy.book.latest()
        if latest is None or latest.version == self.policy_version:
            return
        # Keys stay the gateway's own (its providers file): they never travel in the
        # policy log.
        keys = self.config.gateway_keys
        self.config = latest.config.model_copy(update={"gateway_keys": keys})
        self.policy_version = latest.version

    async def _confirmed(self, prepared: Prepared) -> Prepared:
        """``prepared`` checked against every version proposed before it was prepared: a
        read of the policy topic that began after it (shared, ``PolicyFollower.catch_up``),
        then the check again (its refusal raised)."""
        if prepared.recheck is None:
            return prepared
        try:
            await self._policy.catch_up(prepared.recheck.since)
            self._use_latest()
        except Exception as exc:  # the broker's trouble: the version in force stays
            log.warning("policy topic not read: %s", type(exc).__name__)
        return prepared.recheck.check()

    @property
    def ready(self) -> bool:
        return self._started and self.waiter.running

    @property
    def wait_s(self) -> float:
        return self.settings.routing.request_deadline_s + ANSWER_GRACE_S

    def prepare(
        self,
        body: Any,
        key: GatewayKey,
        asked_id: str | None,
        extra: dict[str, Any] | None = None,
    ) -> Prepared:
        """The checked record for ``body``; GatewayError when ingest would refuse it.
        ``extra``: fields the gateway itself sets on the event (never a body's)."""
        request_id = event_request_id(key, asked_id)
        event = request_event(
            body, request_id, key.tenant, self.reply_to, key.name, key.preset, key.routes
        )
        event.update(extra or {})
        stamp(event)  # the trace context of the gateway's span (app/telemetry/http.py)
        try:
            value = json.dumps(event, separators=(",", ":"), allow_nan=False).encode()
        except ValueError:  # NaN/Infinity in the body
            raise invalid("a number is not valid JSON (NaN or Infinity)", "bad_number") from None
        return self._checked(request_id, value, key, recheck=True)

    def _checked(self, request_id: str, value: bytes, key: GatewayKey, recheck: bool) -> Prepared:
        """The record checked as ingest will check it (``recheck``: a refusal a newer
        policy version may lift is left to :meth:`_confirmed`)."""
        result = accept(
            value,
            LogPosition(topic=self.settings.topics.requests, partition=0, offset=0),
            datetime.now(UTC),
            self.config,
            max_request_bytes=self.settings.max_request_bytes,
            deadletter_max_bytes=64,
            max_json_depth=self.settings.max_json_depth,
            max_int_digits=self.settings.max_int_digits,
        )
        if isinstance(result, DeadLetter):
            if recheck and result.reason in POLICY_REFUSALS:
                again = partial(self._checked, request_id, value, key, False)
                return Prepared(request_id, "", value, Recheck(time.monotonic(), again))
            raise from_dead_letter(result.reason, result.detail)
        check_route(key, result.route)
        return Prepared(request_id, result.route, value)

    def check_room(self) -> None:
        """429 at once when as many requests wait as one gateway lets wait."""
        if self.waiter.waiting >= self.settings.gateway_max_waiting:
            message = f"gateway busy: {self.waiter.waiting} requests waiting"
            raise GatewayError(429, message, "gateway_busy", retry_after_s=1.0)

    async def submit(self, prepared: Prepared, sent: Sent | None = None) -> Response:
        """Publish, then wait for the reply up to :attr:`wait_s` (then find the answer on
        ``llm.responses``, or answer 504 ``gateway_timeout`` with a retry hint).
        ``sent``: told where the request's record is once the broker has it."""
        self.check_room()
        future = self.waiter.expect(prepared.request_id)
        try:
            _told(sent, await self._send(prepared))
            return await asyncio.wait_for(asyncio.shield(future), timeout=self.wait_s)
        except TimeoutError:
            found = await self.lookup.find(prepared.request_id)
            if found is None and future.done() and not future.cancelled():
                found = future.result()  # the reply came during the lookup
            if found is None:
                raise no_answer_in_time(prepared.request_id, self.wait_s) from None
            return found
        finally:
            self.waiter.forget(prepared.request_id)

    async def stream_items(
        self, prepared: Prepared, sent: Sent | None = None
    ) -> AsyncGenerator[StreamDelta | Response | None, None]:
        """Publish, then yield the request's deltas and answer as they come; at the end of
        the wait (:attr:`wait_s`), what came during the lookup on ``llm.responses``, then
        the answer found there or None. Close it when done. ``sent``: as for
        :meth:`submit`, before the first item."""
        self.check_room()
        inbox = self.waiter.expect_stream(prepared.request_id)
        loop = asyncio.get_running_loop()
        try:
            _told(sent, await self._send(prepared))
            deadline = loop.time() + self.wait_s
            while True:
                try:
                    item = await asyncio.wait_for(inbox.get(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    found = await self.lookup.find(prepared.request_id)
                    while not inbox.empty():  # what came during the lookup
                        yield inbox.get_nowait()
                    yield found
                    return
                yield item
        finally:
            self.waiter.forget(prepared.request_id)

    async def _send(self, prepared: Prepared) -> LogPosition:
        """Publish the request's record (confirmed first, see :meth:`_confirmed`); where
        the broker put it."""
        prepared = await self._confirmed(prepared)
        try:
            key = prepared.request_id.encode()
            sent = await self._producer.send_and_wait(
                self.settings.topics.requests, value=prepared.value, key=key
            )
            return LogPosition(topic=sent.topic, partition=sent.partition, offset=sent.offset)
        except Exception as exc:
            message = f"could not publish the request ({type(exc).__name__})"
            raise GatewayError(503, message, "broker_unavailable", retry_after_s=1.0) from None

    async def owned_request(self, key: GatewayKey, request_id: str) -> dict[str, Any]:
        """The ``llm.requests`` record of a request ``key`` may read (404 otherwise: unknown,
        older than the window, or another tenant's)."""
        record = await self.lookup.find_request(request_id)
        if record is None or not owns(key, record):
            raise not_found(request_id)
        return record

    async def resume_items(
        self, record: dict[str, Any]
    ) -> AsyncGenerator[StreamDelta | Response | None, None]:
        """A request's deltas and answer read back from the log (app/gateway/resume.py),
        as :meth:`stream_items` yields them: None, then the end of the wait."""
        topics = (self.settings.topics.deltas, self.settings.topics.replies)
        window = self.settings.gateway_lookup_window
        async with contextlib.aclosing(
            follow(self.bootstrap, topics, record, window, self.wait_s)
        ) as items:
            async for item in items:
                if item is None:
                    item = await self.lookup.find(str(record["request_id"]))
                    yield item
                    return
                yield item

    async def find(self, request_id: str) -> Response | None:
        """An answer by request id: one this gateway saw, else from ``llm.responses``."""
        seen = self.waiter.recent.get(request_id)
        return seen if seen is not None else await self.lookup.find(request_id)

    def models(self) -> list[dict[str, Any]]:
        """``GET /v1/models``: routes, their suffixed aliases, deployments, and the model
        names that name one deployment."""
        entries = []
        for route in self.config.route_names():
            entries.append(_model(route, "route"))
            entries += [_model(f"{route}:{suffix}", "alias") for suffix in ("nitro", "floor")]
        entries += [_model(d, "deployment") for d in self.config.deployment_ids()]
        entries += [
            {**_model(name, "model"), "deployment": deployment}
            for name, deployment in sorted(self.config.named_models.items())
        ]
        return entries


def _told(sent: Sent | None, position: LogPosition) -> None:
    if sent is not None:
        sent(position)


def _model(name: str, kind: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": f"switchyard-{kind}"}
