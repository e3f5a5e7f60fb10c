"""The router agent under a SIGKILL: the order of its row write and its sends (issue 4).

The row write lands in the local store at once; the sends sit in the producer's
buffer until the broker acknowledges them. A kill drops the buffer and keeps the
store, and the redelivered event is then a no-op for the fold (its position is in
the row). So the router must not write a row before the sends of the events it
includes are acknowledged, or the kill loses them: a response nobody will ever
send again. Nor ack an event before a written row includes it.

No broker here: the topics and the table are fakes, the fold is the real one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

import pytest
from factories import T0, accepted, finish, policy

import agents.route_pipeline as pipeline
from app.events import RouteTick, derived_id
from app.routing.book import PolicyBook
from app.routing.fold import at
from app.routing.state import RouteState


class FakeBroker:
    """A producer buffer that a kill drops, and the log that only acknowledged records reach."""

    def __init__(self) -> None:
        self.acknowledge = False
        self.log: list[tuple[str, dict[str, Any]]] = []
        self.buffer: list[tuple[str, bytes, asyncio.Future[None]]] = []
        self.launched: list[Any] = []

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

    async def send(self, *, key: bytes, value: str, headers: Any = None) -> Awaitable[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.broker.acknowledge:
            self.broker.log.append((self.name, json.loads(value)))
            future.set_result(None)
        else:
            self.broker.buffer.append((self.name, value.encode(), future))
        return future


class Holder:
    """The policy holder: the file's policy, no version from the policy topic yet."""

    def __init__(self) -> None:
        self.current = policy()
        self.book = PolicyBook()


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeBroker, dict[str, RouteState]]:
    broker = FakeBroker()
    table: dict[str, RouteState] = {}
    for name in ("decisions_topic", "responses_topic"):
        monkeypatch.setattr(pipeline, name, broker.topic(name))
    for name in ("dispatch_log", "spill_log"):  # the hand-off's (agents/handoff.py)
        monkeypatch.setattr(pipeline.handoff, name, broker.topic(name))
    # Rows written at every chance (the flush interval is tested on its own).
    flush_always = pipeline.settings.model_copy(update={"router_flush_interval_s": 0.0})
    monkeypatch.setattr(pipeline, "settings", flush_always)
    # The calls the router starts in its own process: recorded, not made.
    monkeypatch.setattr(pipeline.handoff, "launch", broker.launched.append)
    monkeypatch.setattr(pipeline, "load_route_state", lambda r: table.get(r, RouteState()))
    monkeypatch.setattr(pipeline, "save_route_state", table.__setitem__)
    holder = Holder()
    monkeypatch.setattr(pipeline, "policy_holder", lambda: holder)
    return broker, table


def tick(t: float) -> RouteTick:
    return RouteTick(id=derived_id("tick", "chat", t), occurred_at=at(t), route="chat")


async def test_kill_before_the_response_is_acknowledged_loses_no_response(
    wired: tuple[FakeBroker, dict[str, RouteState]],
) -> None:
    broker, table = wired
    worker = pipeline.Pipeline()
    broker.acknowledge = True
    assert await worker.fold(accepted("req-1", T0, offset=0), "ev0", 0) == ["ev0"]
    (dispatch,) = broker.records("dispatch_log")
    done = finish("req-1", dispatch["decision"]["deployment"], T0 + 1)

    broker.acknowledge = False
    assert await worker.fold(done, "ev1", 1) == []  # sent, not acknowledged: not acked
    assert table["chat"].position == 0
    broker.kill()  # SIGKILL: the producer buffer and the process memory are gone

    broker.acknowledge = True
    restarted = pipeline.Pipeline()
    assert await restarted.fold(done, "ev1", 1) == ["ev1"]  # redelivered, folded again
    assert [r["request_id"] for r in broker.records("responses_topic")] == ["req-1"]
    assert table["chat"].open_attempts == {} and table["chat"].position == 1


async def test_kill_before_the_dispatch_is_acknowledged_loses_no_dispatch(
    wired: tuple[FakeBroker, dict[str, RouteState]],
) -> None:
    broker, table = wired
    request = accepted("req-2", T0, offset=0)
    assert await pipeline.Pipeline().fold(request, "ev0", 0) == []
    broker.kill()

    broker.acknowledge = True
    assert await pipeline.Pipeline().fold(request, "ev0", 0) == ["ev0"]
    assert [d["decision"]["request_id"] for d in broker.records("dispatch_log")] == ["req-2"]
    assert [d["request_id"] for d in broker.records("decisions_topic")] == ["req-2"]
    assert list(table["chat"].open_attempts) == ["req-2#1"]
    # The call starts where the decision is made, each time it is made.
    assert [d.decision.request_id for d in broker.launched] == ["req-2", "req-2"]


async def test_an_answer_the_executor_published_is_not_sent_again(
    wired: tuple[FakeBroker, dict[str, RouteState]],
) -> None:
    broker, table = wired
    broker.acknowledge = True
    worker = pipeline.Pipeline()
    await worker.fold(accepted("req-3", T0, offset=0), "ev0", 0)
    (dispatch,) = broker.launched
    done = finish("req-3", dispatch.decision.deployment, T0 + 1)
    completion = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    answered = done.model_copy(update={"completion": completion, "answered": True})
    assert await worker.fold(answered, "ev1", 1) == ["ev1"]
    assert broker.records("responses_topic") == []
    assert table["chat"].open_attempts == {}
    # Without the mark the router answers, as for any final result it folds.
    await worker.fold(accepted("req-4", T0, offset=1), "ev2", 2)
    plain = finish("req-4", broker.launched[-1].decision.deployment, T0 + 2)
    await worker.fold(plain.model_copy(update={"completion": completion}), "ev3", 3)
    assert [r["request_id"] for r in broker.records("responses_topic")] == ["req-4"]


async def test_folds_ahead_of_the_broker_and_writes_rows_in_order(
    wired: tuple[FakeBroker, dict[str, RouteState]],
) -> None:
    broker, table = wired
    worker = pipeline.Pipeline()
    assert await worker.fold(accepted("a", T0, offset=0), "ev0", 0) == []
    assert await worker.fold(accepted("b", T0, offset=1), "ev1", 1) == []
    # Folded from the state in memory, not from the (unwritten) row.
    assert list(worker.state("chat").open_attempts) == ["a#1", "b#1"]
    assert "chat" not in table

    first, second = broker.buffer[:2], broker.buffer[2:]
    for _, _, future in second:
        future.set_result(None)
    assert await worker.fold(tick(T0 + 1), "ev2", 2) == []  # b's sends wait for a's
    assert "chat" not in table
    for _, _, future in first:
        future.set_result(None)
    assert await worker.fold(tick(T0 + 2), "ev3", 3) == ["ev0", "ev1", "ev2", "ev3"]
    assert table["chat"].position == 3
    assert list(table["chat"].open_attempts) == ["a#1", "b#1"]
    assert worker.latest == {}  # the row is the fold's input again


async def test_a_send_the_producer_gave_up_on_stops_the_router(
    wired: tuple[FakeBroker, dict[str, RouteState]],
) -> None:
    broker, table = wired
    worker = pipeline.Pipeline()
    assert await worker.fold(accepted("c", T0, offset=0), "ev0", 0) == []
    for _, _, future in broker.buffer:
        future.set_exception(TimeoutError("delivery timed out"))
    with pytest.raises(pipeline.SendFailed):
        await worker.fold(tick(T0 + 1), "ev1", 1)
    assert "chat" not in table  # nothing written, nothing acked: redelivered after restart


async def test_a_batch_of_events_read_together_is_written_as_one_row(
    wired: tuple[FakeBroker, dict[str, RouteState]], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, table = wired
    writes: list[int] = []

    def save(route: str, state: RouteState) -> None:
        writes.append(state.position)
        table[route] = state

    monkeypatch.setattr(pipeline, "save_route_state", save)
    broker.acknowledge = True
    worker = pipeline.Pipeline()
    requests = [accepted(f"b-{i}", T0, offset=i) for i in range(3)]
    assert await worker.fold(requests[0], "ev0", 0, more=True) == []
    assert await worker.fold(requests[1], "ev1", 1, more=True) == []
    assert writes == [] and "chat" not in table  # a kill here redelivers all three
    assert await worker.fold(requests[2], "ev2", 2, more=False) == ["ev0", "ev1", "ev2"]
    assert writes == [2]
    assert len(table["chat"].open_attempts) == 3


async def test_rows_of_a_partition_are_written_at_most_once_per_flush_interval(
    wired: tuple[FakeBroker, dict[str, RouteState]], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, table = wired
    clock = [100.0]
    monkeypatch.setattr(pipeline.time, "monotonic", lambda: clock[0])
    slow = pipeline.settings.model_copy(update={"router_flush_interval_s": 0.1})
    monkeypatch.setattr(pipeline, "settings", slow)
    broker.acknowledge = True
    worker = pipeline.Pipeline()
    assert await worker.fold(accepted("f-0", T0, offset=0), "ev0", 0) == ["ev0"]
    clock[0] += 0.05
    assert await worker.fold(accepted("f-1", T0, offset=1), "ev1", 1) == []  # too soon
    assert table["chat"].position == 0
    clock[0] += 0.06
    assert await worker.fold(accepted("f-2", T0, offset=2), "ev2", 2) == ["ev1", "ev2"]
    assert table["chat"].position == 2
