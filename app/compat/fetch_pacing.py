"""Short fetch waits while records flow, a longer one when a consumer is idle (Tansu).

Tansu holds a fetch that finds no record and looks again only partway through its
wait (app/compat/tansu.py), so a hop between Switchyard's processes costs up to the
consumer's ``fetch_max_wait_ms``: short waits make hops fast. But a waiting consumer
then sends a fetch every few milliseconds, and each costs the broker a look at
every partition it names (an idle worker and an idle broker burned 0.13 and 0.35
cores at a 4 ms wait, ``switchyard bench throughput``).

:class:`FetchPacer` keeps the short wait (``Settings.fetch_max_wait_ms``) while
fetches bring records, and switches to ``Settings.fetch_idle_wait_ms`` once none
has come for ``idle_after_s``: the first record after a quiet spell waits up to the
idle wait on its first hop, and every hop after it is fast again.
:func:`pace_fetches` installs a pacer on a started aiokafka consumer; the worker's
Faust consumer gets one through :func:`app.worker.fetch_wait.install` (on every broker).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer

from app.settings import get_settings

#: A consumer that has received no record for this long polls at the idle wait.
IDLE_AFTER_S = 1.0


class FetchPacer:
    """The wait of a consumer's next fetch, from whether its fetches bring records."""

    __slots__ = ("_clock", "_last_records", "busy_ms", "idle_after_s", "idle_ms")

    def __init__(
        self,
        busy_ms: int,
        idle_ms: int,
        idle_after_s: float = IDLE_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.busy_ms = busy_ms
        self.idle_ms = max(idle_ms, busy_ms)
        self.idle_after_s = idle_after_s
        self._clock = clock
        self._last_records = clock()

    def after_fetch(self, got_records: bool) -> int:
        """The wait for the next fetch, once this one has been answered."""
        now = self._clock()
        if got_records:
            self._last_records = now
        return self.busy_ms if now - self._last_records < self.idle_after_s else self.idle_ms


def settings_pacer() -> FetchPacer:
    settings = get_settings()
    return FetchPacer(settings.fetch_max_wait_ms, settings.fetch_idle_wait_ms)


def pace_fetches(consumer: AIOKafkaConsumer, pacer: FetchPacer | None = None) -> FetchPacer:
    """Pace a started consumer's fetches with ``pacer`` (from the settings by default).

    aiokafka's fetcher reads its ``_fetch_max_wait_ms`` each time it builds a fetch,
    and ``_proc_fetch_request`` tells whether a fetch added records."""
    pacer = pacer or settings_pacer()
    fetcher: Any = consumer._fetcher  # created by start()
    fetcher._fetch_max_wait_ms = pacer.busy_ms
    original = fetcher._proc_fetch_request

    async def paced(assignment: Any, node_id: int, request: Any) -> Any:
        got_records = await original(assignment, node_id, request)
        fetcher._fetch_max_wait_ms = pacer.after_fetch(bool(got_records))
        return got_records

    fetcher._proc_fetch_request = paced
    return pacer


def paced_on_start(consumer: AIOKafkaConsumer, pacer: FetchPacer | None = None) -> AIOKafkaConsumer:
    """Make ``consumer`` pace its fetches once started (for consumers others start)."""
    start = consumer.start

    async def start_paced() -> None:
        await start()
        pace_fetches(consumer, pacer)

    consumer.start = start_paced
    return consumer
