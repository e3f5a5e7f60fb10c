"""The fetch loop's delivery without four tasks per record (app/worker/fast_delivery.py): a
delivery that does not block runs inline; one that blocks is raced against a
rebalance's suspension as mode's ``wait_first`` races it; everything else is mode's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.worker import fast_delivery
from app.worker.fast_delivery import wait_first


class FakeConsumer:
    """What the fetch loop's ``wait_first`` reads of Faust's consumer."""

    def __init__(self, gate: asyncio.Event | None = None, fail: str = "") -> None:
        self.loop = asyncio.get_running_loop()
        self.suspend_flow = asyncio.Event()
        self._stopped = asyncio.Event()
        self._crashed = asyncio.Event()
        self.gate, self.fail = gate, fail
        self.delivered: list[str] = []
        self.cancelled: list[str] = []

    async def callback(self, message: str) -> None:
        if self.fail == "at once":
            raise ValueError(message)
        if self.gate is not None:
            try:
                await self.gate.wait()  # a full stream buffer
            except asyncio.CancelledError:
                self.cancelled.append(message)
                raise
            if self.fail == "later":
                raise ValueError(message)
        self.delivered.append(message)


@pytest.fixture
def mode_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    original = fast_delivery._mode_wait_first

    async def spy(self: Any, *coros: Any, timeout: Any = None) -> Any:
        calls.append(coros)
        return await original(self, *coros, timeout=timeout)

    monkeypatch.setattr(fast_delivery, "_mode_wait_first", spy)
    return calls


async def test_a_delivery_that_does_not_block_runs_inline(
    mode_calls: list[tuple[Any, ...]],
) -> None:
    consumer = FakeConsumer()
    suspension = consumer.suspend_flow.wait()
    await wait_first(consumer, consumer.callback("r1"), suspension)
    assert consumer.delivered == ["r1"]
    assert mode_calls == []  # no task, no race
    assert suspension.cr_frame is None  # closed: never awaited, no warning


async def test_an_inline_delivery_gives_the_streams_a_turn() -> None:
    """Else a fetched batch fills the streams' buffers and pauses the partitions."""
    consumer = FakeConsumer()
    turns: list[str] = []

    async def stream() -> None:
        turns.append("took a record")

    task = asyncio.ensure_future(stream())
    await wait_first(consumer, consumer.callback("r1"), consumer.suspend_flow.wait())
    assert turns == ["took a record"] and task.done()


async def test_a_blocked_delivery_finishes_when_its_buffer_frees(
    mode_calls: list[tuple[Any, ...]],
) -> None:
    gate = asyncio.Event()
    consumer = FakeConsumer(gate)
    waiting = asyncio.ensure_future(
        wait_first(consumer, consumer.callback("r1"), consumer.suspend_flow.wait())
    )
    await asyncio.sleep(0.01)
    assert not waiting.done() and consumer.delivered == []
    gate.set()
    await asyncio.wait_for(waiting, 1.0)
    assert consumer.delivered == ["r1"] and len(mode_calls) == 1


async def test_a_rebalance_interrupts_a_blocked_delivery(
    mode_calls: list[tuple[Any, ...]],
) -> None:
    consumer = FakeConsumer(asyncio.Event())  # never freed
    waiting = asyncio.ensure_future(
        wait_first(consumer, consumer.callback("r1"), consumer.suspend_flow.wait())
    )
    await asyncio.sleep(0.01)
    consumer.suspend_flow.set()
    await asyncio.wait_for(waiting, 1.0)
    await asyncio.sleep(0)  # the cancelled delivery runs its handler
    assert consumer.delivered == [] and consumer.cancelled == ["r1"]


@pytest.mark.parametrize("fail", ["at once", "later"])
async def test_a_failing_delivery_raises(fail: str) -> None:
    gate = asyncio.Event()
    gate.set()
    consumer = FakeConsumer(gate if fail == "later" else None, fail)
    with pytest.raises(ValueError, match="r1"):
        await wait_first(consumer, consumer.callback("r1"), consumer.suspend_flow.wait())


async def test_while_the_flow_is_suspended_mode_races_it(
    mode_calls: list[tuple[Any, ...]],
) -> None:
    consumer = FakeConsumer()
    consumer.suspend_flow.set()
    await wait_first(consumer, consumer.callback("r1"), consumer.suspend_flow.wait())
    assert len(mode_calls) == 1


async def test_other_waits_are_mode_s(mode_calls: list[tuple[Any, ...]]) -> None:
    consumer = FakeConsumer()
    other = asyncio.Event()
    other.set()
    await wait_first(consumer, other.wait(), consumer.suspend_flow.wait())
    assert len(mode_calls) == 1


def test_the_worker_s_consumer_has_it() -> None:
    from faust.transport.drivers import aiokafka as driver

    from agents.app import app  # builds the worker's app

    assert app.conf.broker  # built
    assert driver.Consumer.wait_first is wait_first
