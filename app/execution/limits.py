"""The time limits of one provider call, on one timer.

Three limits, whichever comes first ends the call:

* the whole call (``timeout_ms``, already cut at the request's deadline by the
  executor): from sending the request to the end of the answer;
* the first token (``ttft_timeout_ms``, optional): from sending the request to a
  stream's first piece of answer, or to a plain call's response headers;
* the gap between chunks (``stream_idle_timeout_ms``, streams): once the answer
  has begun, no ``data:`` event for this long.

One ``asyncio`` timeout is moved from limit to limit, and the limit it is set to
when it fires names the error: ``timeout after 30s``, ``ttft_timeout after 2s``,
``stream_idle after 10s``. When a shorter limit would end at or after the whole
call's, the whole call's is the one in force (and named): a call the request's
deadline cut short stays ``timeout after Xs``, which the executor blames on the
deadline (``expired``), not on the provider.
"""

from __future__ import annotations

import asyncio
from typing import Final

#: The first words of the error of each limit.
WHOLE: Final = "timeout"
FIRST_TOKEN: Final = "ttft_timeout"
IDLE: Final = "stream_idle"


class CallLimits:
    """The timer of one call: create it, then enter :meth:`timer`, before sending the request."""

    def __init__(
        self, whole_s: float, *, ttft_s: float | None = None, idle_s: float | None = None
    ) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        started = loop.time()
        self._end = started + whole_s
        self._seconds = {WHOLE: whole_s, FIRST_TOKEN: ttft_s, IDLE: idle_s}
        self._begun = False
        #: The limit the timer is set to now.
        self.limit: str = WHOLE
        first = self._end
        if ttft_s is not None and started + ttft_s < self._end:
            first, self.limit = started + ttft_s, FIRST_TOKEN
        self._timeout = asyncio.timeout_at(first)

    def timer(self) -> asyncio.Timeout:
        """The call's one timeout (``async with``): raises ``TimeoutError`` when it fires."""
        return self._timeout

    def headers(self) -> None:
        """A plain call's response headers came (or a stream's that is not a stream of
        events: an error, a whole JSON answer): only the whole call's limit is left."""
        self._begun = True
        self._move(self._end, WHOLE)

    def event(self, answers: bool) -> None:
        """A stream's event came; ``answers``: it carried a piece of the answer. From the
        first piece on, the gap to the next event is limited."""
        self._begun = self._begun or answers
        if not self._begun:
            return  # the first-token limit (or the whole call's) still holds
        idle_s = self._seconds[IDLE]
        self._move(self._end if idle_s is None else self._loop.time() + idle_s, IDLE)

    def error(self) -> str:
        """The error of the limit in force: ``ttft_timeout after 2s``."""
        return f"{self.limit} after {self._seconds[self.limit]:g}s"

    def _move(self, when: float, limit: str) -> None:
        if when >= self._end:
            when, limit = self._end, WHOLE
        if when != self._timeout.when():
            self._timeout.reschedule(when)
        self.limit = limit
