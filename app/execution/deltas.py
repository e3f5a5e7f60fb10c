"""Publish one call's stream as ``response.delta`` events, while it comes.

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

A call that goes on with a broken stream's answer (mid-stream failover: the request's
``answered_prefix``) publishes with ``offset`` the length of the text the client has:
given it as a prefill, its text continues that; restarting, its first text is held
until it is known to begin with that, and only what follows is published (nothing, if
it does not: the gateway then ends the client's stream with an error event).

With output guardrails, text is published once it has passed them (redacted where a
rule says so): the screen holds back the last few hundred characters until no rule can
still change them, and once a rule blocks the answer nothing more of it is published
(the call then ends ``failed``: the client's stream ends with an error event).

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

from app.contract import Dispatch, StreamDelta, StreamEnd, delta_id
from app.execution.pieces import whole_text
from app.guardrails import StreamScreen

log = logging.getLogger(__name__)
#: Enqueue a delta for sending; returns what resolves once the broker has it.
Send = Callable[[StreamDelta], Awaitable[Awaitable[Any]]]


class DeltaPublisher:
    """A :class:`app.execution.stream.DeltaSink` that publishes through ``send``."""

    def __init__(
        self,
        dispatch: Dispatch,
        send: Send,
        interval_s: float,
        screen: StreamScreen | None = None,
    ) -> None:
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
        #: Characters of the answer the client had before this call (a continuation).
        self.offset = 0
        #: Restarting after a broken stream: the text the client already has, which this
        #: call's answer must begin with before anything of it is published.
        self._owed: str | None = None
        self._seen = ""
        self._published: list[str] = []
        self._published_other = False
        #: A restarted answer that did not begin with the text the client has.
        self.diverged = False
        #: The output guardrails' screen (app/guardrails/): text is published once it
        #: has passed them, redacted; nothing more once one blocks.
        self._screen = screen

    @property
    def started(self) -> bool:
        """Whether a delta was published (the client may have seen this call)."""
        return self._seq > 0

    def continue_after(self, prefix: str) -> None:
        """The call continues ``prefix`` (the provider was given it as a prefill)."""
        self.offset, self._owed = len(prefix), None

    def restart_after(self, prefix: str) -> None:
        """The call restarts the answer: publish only what comes after ``prefix``, and
        nothing at all if the answer does not begin with it."""
        self.offset, self._owed, self._seen = len(prefix), prefix, ""

    @property
    def published_text(self) -> str | None:
        """The text this call published (after ``offset``), or None when it published a
        tool call or a refusal too (a stream no text prefix can continue)."""
        return None if self._published_other else "".join(self._published)

    def piece(
        self, content: str, tool_calls: list[dict[str, Any]] | None, refusal: str | None
    ) -> None:
        if self._owed is not None or self.diverged:
            content, tool_calls, refusal = self._after_owed(content, tool_calls, refusal)
            if not (content or tool_calls or refusal):
                return
        if self._screen is not None and content:
            content = self._screen.feed(content)
            if not (content or tool_calls or refusal):
                return
        if content:
            self._text.append(content)
        self._calls.extend(tool_calls or [])
        if refusal:
            self._refusal.append(refusal)
        if self._task is None and not self._closing.is_set():
            self._task = asyncio.create_task(self._run(), name=f"deltas-{self.call_id}")

    def _after_owed(
        self, content: str, tool_calls: list[dict[str, Any]] | None, refusal: str | None
    ) -> tuple[str, list[dict[str, Any]] | None, str | None]:
        """What a restarted answer adds beyond the text the client has (nothing while it
        is still catching up, and nothing ever once it differs)."""
        owed = self._owed
        if self.diverged or owed is None:
            return ("", None, None) if self.diverged else (content, tool_calls, refusal)
        self._seen += content
        if len(self._seen) < len(owed):
            if not owed.startswith(self._seen) or tool_calls or refusal:
                self.diverged = True
            return "", None, None
        if not self._seen.startswith(owed):
            self.diverged = True
            return "", None, None
        self._owed = None
        return self._seen[len(owed) :], tool_calls, refusal

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
        if self._screen is not None and end == "ok" and (rest := self._screen.finish()):
            self._text.append(rest)
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
        self._published.append(content)
        self._published_other = self._published_other or bool(calls or refusal)
        seq, self._seq = self._seq, self._seq + 1
        delta = StreamDelta(
            id=delta_id(self.request_id, self.attempt, self.call_id, seq),
            occurred_at=datetime.now(UTC),
            request_id=self.request_id,
            attempt=self.attempt,
            call_id=self.call_id,
            seq=seq,
            offset=self.offset,
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
