"""A route a policy version adds is never refused for a version not read yet: the policy
follower's catch-up (a read of the policy topic that began after the request came, shared
by the requests meanwhile and at most ten a second), and ingest and the gateway asking
for it before they refuse an unknown route. No broker here: the topic reads are fakes."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from factories import provider, routing_config

import agents.ingest as ingest
import app.policy.log as policy_log
from app.config.access import GatewayKey
from app.config.schema import RouteConfig, RoutingConfig
from app.contract import DeadLetter, LogPosition
from app.gateway.errors import GatewayError
from app.gateway.service import Gateway
from app.policy.log import CATCH_UP_INTERVAL_S, PolicyFollower, proposal
from app.routing.book import params_document
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from app.settings import Settings

WHERE = LogPosition(topic="llm.requests", partition=0, offset=3)
WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def config(*routes: str) -> RoutingConfig:
    base = routing_config(provider("a"))
    wanted = {name: RouteConfig(providers=["a"]) for name in routes}
    return base.model_copy(update={"routes": wanted, "default_route": routes[0]})


def proposed(*routes: str) -> bytes:
    from app.contract import PolicyDocument

    document = PolicyDocument(
        config=config(*routes).model_dump(mode="json"), params=params_document(RoutingParams())
    )
    return proposal(document, "apply").model_dump_json().encode()


class Topic:
    """The policy topic: its records, and the reads made of it."""

    def __init__(self) -> None:
        self.records: list[bytes] = [proposed("chat")]
        self.reads = 0

    async def read_from(self, _settings: Any, start: int) -> list[tuple[int, bytes]]:
        self.reads += 1
        await asyncio.sleep(0.01)
        return [(n, value) for n, value in enumerate(self.records) if n >= start]


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> Topic:
    found = Topic()
    monkeypatch.setattr(policy_log, "_read_from", found.read_from)
    return found


async def test_catch_up_reads_only_when_the_last_read_began_before(topic: Topic) -> None:
    follower = PolicyFollower(Settings())
    await follower.refresh()
    assert (topic.reads, follower.book.latest_version()) == (1, 1)
    assert await follower.catch_up(follower.read_since - 1.0) == []  # read since: no read
    assert topic.reads == 1
    topic.records.append(proposed("chat", "chat2"))
    found = await follower.catch_up(time.monotonic())
    assert [v.number for v in found] == [2] and topic.reads == 2
    assert "chat2" in follower.book.latest().config.routes  # type: ignore[union-attr]


async def test_requests_meanwhile_share_reads_begun_at_most_ten_a_second(topic: Topic) -> None:
    follower = PolicyFollower(Settings())
    await follower.refresh()
    began = time.monotonic()
    await asyncio.gather(*(follower.catch_up(time.monotonic()) for _ in range(50)))
    assert topic.reads == 2  # one more read for the fifty
    await follower.catch_up(time.monotonic())
    assert topic.reads == 3
    assert time.monotonic() - began >= CATCH_UP_INTERVAL_S


class Follower:
    """A follower whose catch-up finds ``then`` (or fails)."""

    def __init__(self, holder: Holder, then: Policy | None, fails: bool = False) -> None:
        self.holder, self.then, self.fails, self.calls = holder, then, fails, 0

    async def catch_up(self, since: float) -> list[Any]:
        self.calls += 1
        assert since <= time.monotonic()
        if self.fails:
            raise ConnectionError("broker away")
        if self.then is not None:
            self.holder.current = self.then
        return []


class Holder:
    def __init__(self, then: Policy | None, fails: bool = False) -> None:
        self.current = Policy(config("chat"), RoutingParams())
        self._follower = Follower(self, then, fails)

    def follower(self) -> Follower:
        return self._follower


class Topics:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, *, key: bytes, value: str | bytes) -> asyncio.Future[None]:
        self.sent.append(value.encode() if isinstance(value, str) else value)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def ingest_with(monkeypatch: pytest.MonkeyPatch, holder: Holder) -> tuple[Topics, Topics]:
    routing, letters = Topics(), Topics()
    monkeypatch.setattr(ingest, "routing_log", routing)
    monkeypatch.setattr(ingest, "deadletter_topic", letters)
    monkeypatch.setattr(ingest, "policy_holder", lambda: holder)
    return routing, letters


def ask(model: str) -> bytes:
    return json.dumps(
        {"request_id": "r1", "model": model, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()


@pytest.mark.parametrize(
    ("then", "fails", "forwarded"),
    [
        (Policy(config("chat", "chat2"), RoutingParams(), version=2), False, True),
        (None, False, False),  # no newer version: refused
        (None, True, False),  # the topic not read: the refusal stands
    ],
)
async def test_ingest_reads_the_policy_topic_before_it_refuses_an_unknown_route(
    monkeypatch: pytest.MonkeyPatch, then: Policy | None, fails: bool, forwarded: bool
) -> None:
    holder = Holder(then, fails)
    routing, letters = ingest_with(monkeypatch, holder)
    delivered = await ingest.ingest_one(ask("chat2"), WHERE, WHEN)
    await delivered
    assert holder.follower().calls == 1
    assert len(routing.sent) == int(forwarded)
    reasons = [DeadLetter.model_validate_json(v).reason for v in letters.sent]
    assert reasons == ([] if forwarded else ["unknown_route"])


async def test_ingest_reads_nothing_for_a_known_route(monkeypatch: pytest.MonkeyPatch) -> None:
    holder = Holder(None)
    routing, _ = ingest_with(monkeypatch, holder)
    await ingest.ingest_one(ask("chat"), WHERE, WHEN)
    assert holder.follower().calls == 0 and len(routing.sent) == 1


async def test_the_gateway_checks_an_unknown_route_again_before_it_refuses(
    topic: Topic,
) -> None:
    gateway = Gateway(Settings(), config("chat"))
    key = GatewayKey(sha256="0" * 64, name="k")
    body = {"model": "chat2", "messages": [{"role": "user", "content": "hi"}]}
    pending = gateway.prepare(body, key, None)
    assert pending.recheck is not None and pending.route == ""
    with pytest.raises(GatewayError) as refused:  # the topic has no version adding it
        await gateway._confirmed(pending)
    assert refused.value.status == 404 and refused.value.code == "model_not_found"
    topic.records.append(proposed("chat", "chat2"))
    confirmed = await gateway._confirmed(gateway.prepare(body, key, None))
    assert (confirmed.route, confirmed.recheck, gateway.policy_version) == ("chat2", None, 2)
    reads = topic.reads
    known = gateway.prepare({**body, "model": "chat"}, key, None)
    assert known.recheck is None and (await gateway._confirmed(known)).route == "chat"
    assert topic.reads == reads
