"""The router agent under a SIGKILL: the order of its row write and its sends.

The row write lands in the local store at once; the sends sit in the producer's
buffer until the broker acknowledges them. A kill drops the buffer and keeps the
store, and the redelivered event is then a no-op for the fold (its position is in
the row). So the router must not write a row before the sends of the events it
includes are acknowledged, or the kill loses them: a response nobody will ever
send again. Nor ack an event before a written row includes it.

No broker here: the topics and the table are fakes (tests/router_fakes.py), the fold is
the real one.
"""

from __future__ import annotations

import pytest
from factories import T0, accepted, finish
from router_fakes import Wired, wired

from app.contract import RouteTick, derived_id
from app.router.pipeline import SendFailed
from app.routing.fold import at
from app.routing.state import RouteState

__all__ = ["wired"]  # the fixture (tests/router_fakes.py)


def tick(t: float) -> RouteTick:
    return RouteTick(id=derived_id("tick", "chat", t), occurred_at=at(t), route="chat")


async def test_kill_before_the_response_is_acknowledged_loses_no_response(
    wired: Wired,
) -> None:
    broker, table = wired.broker, wired.table
    worker = wired.router()
    broker.acknowledge = True
    assert await worker.fold(accepted("req-1", T0, offset=0), "ev0", 0) == ["ev0"]
    (dispatch,) = broker.records("dispatch_log")
    done = finish("req-1", dispatch["decision"]["deployment"], T0 + 1)

    broker.acknowledge = False
    assert await worker.fold(done, "ev1", 1) == []  # sent, not acknowledged: not acked
    assert table["chat"].position == 0
    broker.kill()  # SIGKILL: the producer buffer and the process memory are gone

    broker.acknowledge = True
    restarted = wired.router()
    assert await restarted.fold(done, "ev1", 1) == ["ev1"]  # redelivered, folded again
    assert [r["request_id"] for r in broker.records("responses_topic")] == ["req-1"]
    assert table["chat"].open_attempts == {} and table["chat"].position == 1


async def test_kill_before_the_dispatch_is_acknowledged_loses_no_dispatch(
    wired: Wired,
) -> None:
    broker, table = wired.broker, wired.table
    request = accepted("req-2", T0, offset=0)
    assert await wired.router().fold(request, "ev0", 0) == []
    broker.kill()

    broker.acknowledge = True
    assert await wired.router().fold(request, "ev0", 0) == ["ev0"]
    assert [d["decision"]["request_id"] for d in broker.records("dispatch_log")] == ["req-2"]
    assert [d["request_id"] for d in broker.records("decisions_topic")] == ["req-2"]
    assert list(table["chat"].open_attempts) == ["req-2#1"]
    # The call starts where the decision is made, each time it is made.
    assert [d.decision.request_id for d in broker.launched] == ["req-2", "req-2"]


async def test_an_answer_the_executor_published_is_not_sent_again(
    wired: Wired,
) -> None:
    broker, table = wired.broker, wired.table
    broker.acknowledge = True
    worker = wired.router()
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
    wired: Wired,
) -> None:
    broker, table = wired.broker, wired.table
    worker = wired.router()
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
    wired: Wired,
) -> None:
    broker, table = wired.broker, wired.table
    worker = wired.router()
    assert await worker.fold(accepted("c", T0, offset=0), "ev0", 0) == []
    for _, _, future in broker.buffer:
        future.set_exception(TimeoutError("delivery timed out"))
    with pytest.raises(SendFailed):
        await worker.fold(tick(T0 + 1), "ev1", 1)
    assert "chat" not in table  # nothing written, nothing acked: redelivered after restart


async def test_a_batch_of_events_read_together_is_written_as_one_row(
    wired: Wired,
) -> None:
    broker, table = wired.broker, wired.table
    writes: list[int] = []

    def save(route: str, state: RouteState) -> None:
        writes.append(state.position)
        table[route] = state

    wired.save = save
    broker.acknowledge = True
    worker = wired.router()
    requests = [accepted(f"b-{i}", T0, offset=i) for i in range(3)]
    assert await worker.fold(requests[0], "ev0", 0, more=True) == []
    assert await worker.fold(requests[1], "ev1", 1, more=True) == []
    assert writes == [] and "chat" not in table  # a kill here redelivers all three
    assert await worker.fold(requests[2], "ev2", 2, more=False) == ["ev0", "ev1", "ev2"]
    assert writes == [2]
    assert len(table["chat"].open_attempts) == 3


async def test_rows_of_a_partition_are_written_at_most_once_per_flush_interval(
    wired: Wired,
) -> None:
    broker, table = wired.broker, wired.table
    clock = [100.0]
    wired.clock = lambda: clock[0]
    wired.flush_interval_s = 0.1
    broker.acknowledge = True
    worker = wired.router()
    assert await worker.fold(accepted("f-0", T0, offset=0), "ev0", 0) == ["ev0"]
    clock[0] += 0.05
    assert await worker.fold(accepted("f-1", T0, offset=1), "ev1", 1) == []  # too soon
    assert table["chat"].position == 0
    clock[0] += 0.06
    assert await worker.fold(accepted("f-2", T0, offset=2), "ev2", 2) == ["ev1", "ev2"]
    assert table["chat"].position == 2
