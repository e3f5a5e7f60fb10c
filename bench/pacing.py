"""Items at a fixed rate: the open-loop loads of the benches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

T = TypeVar("T")


async def paced(items: Iterable[T], rate: float | None) -> AsyncIterator[tuple[int, T]]:
    """``items`` with their index, item *i* due *i / rate* s after the first (back to back
    when ``rate`` is None); a late one comes at once."""
    started = time.monotonic()
    for index, item in enumerate(items):
        if rate is not None:
            delay = started + index / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        yield index, item
