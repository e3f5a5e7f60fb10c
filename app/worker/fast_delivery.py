"""Faust's consumer hands a record to its streams without four tasks per record.

Faust's fetch loop (``Consumer._drain_messages``) delivers each record with
``await self.wait_first(callback(record), self.suspend_flow.wait())``, so that a
rebalance (``suspend_flow``) can interrupt a delivery blocked on a full stream
buffer. mode's ``wait_first`` makes that race with four tasks (the delivery, the
suspension, the service's stop and crash events), ``asyncio.wait`` and three
cancellations: for every record, although a delivery almost never blocks (it puts
the event in the streams' queues).

:func:`install` gives the aiokafka driver's consumer a ``wait_first`` that runs the
delivery's first step inline when the flow is active: if the delivery completes
without blocking, it gives the loop one turn (the streams take the record) and that
is all; if it blocks, the rest of it is raced against the suspension exactly as
before (mode's ``wait_first``, from where it stopped). Only the
fetch loop's call is taken this way (its first argument is a coroutine of the
consumer's own callback); every other ``wait_first`` is mode's.

Delivering faster made a race in Faust's rebalance recovery frequent: a record
delivered just before the recovery's last ``flow_control.resume()`` was dropped from
its buffer and never read again. The worker's flow control (app/worker/flow_control.py)
closes it; tests/test_rebalance.py guards both.

``switchyard bench record_cost`` measures a record consumed with and without it
(``RC_FAST_DELIVERY=0``; docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

from faust.transport.drivers import aiokafka as driver
from mode import Service

_mode_wait_first = Service.wait_first


async def wait_first(self: Any, *coros: Any, timeout: Any = None) -> Any:
    """mode's ``Service.wait_first``, with the fetch loop's delivery run inline first."""
    if not _is_delivery(self, coros, timeout):
        return await _mode_wait_first(self, *coros, timeout=timeout)
    delivery, suspension = coros
    try:
        blocked_on = delivery.send(None)
    except StopIteration:
        suspension.close()  # never started: nothing waits on it
        # One turn of the loop per record, as mode's race gave the streams: delivering
        # a fetched batch without one filled the streams' buffers to their high mark,
        # which pauses the partitions' fetching (half the records per second, measured).
        await asyncio.sleep(0)
        return None  # the fetch loop does not read the result
    except BaseException:
        suspension.close()
        raise
    return await _mode_wait_first(self, _Resumed(delivery, blocked_on), suspension)


def _is_delivery(consumer: Any, coros: tuple[Any, ...], timeout: Any) -> bool:
    """The fetch loop's call, while the flow runs (else mode's own race, as it was)."""
    if len(coros) != 2 or timeout is not None:
        return False
    callback = getattr(consumer, "callback", None)
    code = getattr(callback, "__code__", None)
    if code is None or getattr(coros[0], "cr_code", None) is not code:
        return False
    return not (
        consumer.suspend_flow.is_set() or consumer._stopped.is_set() or consumer._crashed.is_set()
    )


class _Resumed:
    """A started coroutine, as an awaitable that drives it on from where it blocked.

    What ``await`` does between a task and a coroutine: the first value the coroutine
    yielded (the future it waits on) goes to the task, and what the task sends or
    throws back (a wake-up, a cancellation) goes to the coroutine.
    """

    def __init__(self, coroutine: Coroutine[Any, Any, Any], blocked_on: Any) -> None:
        self._coroutine = coroutine
        self._blocked_on = blocked_on

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine, yielded = self._coroutine, self._blocked_on
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:
                try:
                    yielded = coroutine.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    yielded = coroutine.send(sent)
                except StopIteration as done:
                    return done.value


_installed = False


def install() -> None:
    """Give the aiokafka driver's consumer (the worker's) this ``wait_first``."""
    global _installed
    if not _installed:
        driver.Consumer.wait_first = wait_first  # type: ignore[method-assign]
        _installed = True
