"""The router agent under a SIGKILL: the order of its row write and its sends (issue 4).

The row write lands in the local store at once; the sends sit in the producer's
buffer until the broker acknowledges them. A kill drops the buffer and keeps the
store, and the redelivered event is then a no-op for the fold (its position is in
the row). So the router must not write the row before its sends are
acknowledged, or the kill loses them: a response nobody will ever send again.

No broker here: the topics and the table are fakes, the fold is the real one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

import pytest
from factories import T0, accepted, finish, policy

import agents.router as router
from app.events import RoutingLogEvent
from app.routing.state import RouteState


class FakeBroker:
    """A producer buffer that a kill drops, and the log that only acknowledged records reach."""

    def __init__(self) -> None:
        self.acknowledge = False
        self.log: list[tuple[str, dict[str, Any]]] = []
        self.buffer: list[tuple[str, bytes, asyncio.Future[None]]] = []

    def topic(self, name: str) -> FakeTopic:
        return FakeTopic(self, name)

    def kill(self) -> None:
        for _, _, future in self.buffer:
            future.cancel()
        self.buffer.clear()

    def records(self, topic: str) -> list[dict[str, Any]]:
        return [value for name, value in self.log if name == topic]


class FakeTopic:
    def __init__(self, broker: FakeBroker, name: str) -> None:
        self.broker = broker
        self.name = name

    async def send(self, *, key: bytes, value: str) -> Awaitable[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.broker.acknowledge:
            self.broker.log.append((self.name, json.loads(value)))
            future.set_result(None)
        else:
            self.broker.buffer.append((self.name, value.encode(), future))
        return future


class Holder:
    def __init__(self) -> None:
        self.current = policy()


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeBroker, dict[str, RouteState]]:
    broker = FakeBroker()
    table: dict[str, RouteState] = {}
    for name in ("decisions_topic", "dispatch_topic", "responses_topic"):
        monkeypatch.setattr(router, name, broker.topic(name))
    monkeypatch.setattr(router, "load_route_state", lambda r: table.get(r, RouteState()))
    monkeypatch.setattr(router, "save_route_state", table.__setitem__)
    holder = Holder()
    monkeypatch.setattr(router, "policy_holder", lambda: holder)
    return broker, table


async def _killed_while_folding(broker: FakeBroker, event: RoutingLogEvent, offset: int) -> None:
    """Fold ``event`` while the broker acknowledges nothing, then SIGKILL the worker."""
    broker.acknowledge = False
    folding = asyncio.create_task(router._fold(event, offset))
    for _ in range(20):
        await asyncio.sleep(0)
    folding.cancel()  # the process dies: its task, and everything in the producer buffer
    broker.kill()
    await asyncio.gather(folding, return_exceptions=True)
    broker.acknowledge = True


async def test_kill_before_the_response_is_acknowledged_loses_no_response(
    wired: tuple[FakeBroker, dict[str, RouteState]],
) -> None:
    broker, table = wired
    request = accepted("req-1", T0, offset=0)
    broker.acknowledge = True
    await router._fold(request, 0)
    (dispatch,) = broker.records("dispatch_topic")
    deployment = dispatch["decision"]["deployment"]
    done = finish("req-1", deployment, T0 + 1)

    await _killed_while_folding(broker, done, 1)
    await router._fold(done, 1)  # redelivered: the source offset was not committed

    assert [r["request_id"] for r in broker.records("responses_topic")] == ["req-1"]
    assert table["chat"].open_attempts == {}


async def test_kill_before_the_dispatch_is_acknowledged_loses_no_dispatch(
    wired: tuple[FakeBroker, dict[str, RouteState]],
) -> None:
    broker, table = wired
    request = accepted("req-2", T0, offset=0)

    await _killed_while_folding(broker, request, 0)
    await router._fold(request, 0)  # redelivered

    assert [d["decision"]["request_id"] for d in broker.records("dispatch_topic")] == ["req-2"]
    assert [d["request_id"] for d in broker.records("decisions_topic")] == ["req-2"]
    assert list(table["chat"].open_attempts) == ["req-2#1"]


async def test_row_is_written_once_the_sends_are_acknowledged(
    wired: tuple[FakeBroker, dict[str, RouteState]],
) -> None:
    broker, table = wired
    broker.acknowledge = False
    folding = asyncio.create_task(router._fold(accepted("req-3", T0, offset=0), 0))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not folding.done() and "chat" not in table  # waiting for the broker
    for _, _, future in broker.buffer:
        future.set_result(None)
    await folding
    assert table["chat"].position == 0
