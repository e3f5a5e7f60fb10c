"""Publish one call's stream as ``response.delta`` events (issue 12), while it comes.

The rule (docs/gateway.md, "The streaming rule"):

* nothing is published until the provider's stream carried some of the answer (text,
  a tool call, a refusal): a stream that fails before that leaves no delta, and its
  retry is invisible to the client;
* the first piece is published at once (time to first token), then what came since at
  most every ``interval_s`` (one record per interval, not one per token);
* the last delta says how the call ended: ``failed`` (published, and acknowledged,
  before the attempt's feedback, so a retry's deltas always come after it in the
  partition) or ``ok`` (published once the answer is on ``llm.responses``); a call
  that published no piece publishes no end either (the gateway then streams the whole
  answer from its reply).

A trailing UTF-16 high surrogate is held back until its other half comes; a lone half
becomes U+FFFD. Sends that fail are logged by type only (never the text); the whole
answer on ``llm.responses`` stays the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from app.events import Dispatch, StreamDelta, StreamEnd, delta_id
from app.execution.pieces import whole_text

log = logging.getLogger(__name__)
#: Enqueue a delta for sending; returns what resolves once the broker has it.
Send = Callable[[StreamDelta], Awaitable[Awaitable[Any]]]


class DeltaPublisher:
    """A :class:`app.execution.stream.DeltaSink` that publishes through ``send``."""

    def __init__(self, dispatch: Dispatch, send: Send, interval_s: float) -> None:
        decision = dispatch.decision
        self.request_id = decision.request_id
        self.attempt = decision.attempt
        self.deployment = decision.deployment
        self.call_id = uuid.uuid4().hex
        self.interval_s = interval_s
        self._send = send
        self._seq = 0
        self._text: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._refusal: list[str] = []
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._deliveries: list[Awaitable[Any]] = []

    @property
    def started(self) -> bool:
        """Whether a delta was published (the client may have seen this call)."""
        return self._seq > 0

    def piece(
        self, content: str, tool_calls: list[dict[str, Any]] | None, refusal: str | None
    ) -> None:
        if content:
            self._text.append(content)
        self._calls.extend(tool_calls or [])
        if refusal:
            self._refusal.append(refusal)
        if self._task is None and not self._closing.is_set():
            self._task = asyncio.create_task(self._run(), name=f"deltas-{self.call_id}")

    async def finish(
        self,
        end: StreamEnd,
        *,
        finish_reason: str | None = None,
        usage: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """Publish what is left with the end marker and wait until the broker has every
        delta. A call that published nothing publishes nothing (a stream with no piece of
        an answer, or a server that answered JSON: the whole answer is the record)."""
        await self._stop()
        if not self.started:
            return
        fields = {"end": end, "finish_reason": finish_reason, "usage": usage, "error": error}
        await self._publish(final=True, **fields)
        results = await asyncio.gather(*self._deliveries, return_exceptions=True)
        lost = sum(isinstance(r, BaseException) for r in results)
        if lost:
            log.warning("%d deltas of %s#%s not delivered", lost, self.request_id, self.attempt)

    def abandon(self) -> None:
        """Stop publishing (the call was cancelled): no end marker."""
        self._closing.set()
        if self._task is not None:
            self._task.cancel()

    async def _stop(self) -> None:
        self._closing.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await self._publish(final=False)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.interval_s)
            if self._closing.is_set():
                return

    async def _publish(self, *, final: bool, **fields: Any) -> None:
        content = self._take_text(final)
        calls, refusal = self._calls, "".join(self._refusal)
        if not (content or calls or refusal or final):
            return
        self._calls, self._refusal = [], []
        seq, self._seq = self._seq, self._seq + 1
        delta = StreamDelta(
            id=delta_id(self.request_id, self.attempt, self.call_id, seq),
            occurred_at=datetime.now(UTC),
            request_id=self.request_id,
            attempt=self.attempt,
            call_id=self.call_id,
            seq=seq,
            deployment=self.deployment,
            content=content,
            tool_calls=calls or None,
            refusal=whole_text(refusal) if refusal else None,
            **fields,
        )
        try:
            self._deliveries.append(await self._send(delta))
        except Exception as exc:  # the broker's trouble; the whole answer is the record
            log.warning("delta of %s#%s not sent: %s", self.request_id, seq, type(exc).__name__)

    def _take_text(self, final: bool) -> str:
        text = "".join(self._text)
        held = "" if final or not text or not "\ud800" <= text[-1] <= "\udbff" else text[-1]
        self._text = [held] if held else []
        return whole_text(text[: len(text) - len(held)])
