"""A ``stream: true`` request's deltas and answer as OpenAI's server-sent chunks (pure).

The streaming rule (docs/gateway.md): the gateway commits to the first call whose first
delta (``seq`` 0) arrives, sends the stream's headers then, and from then on forwards
only that call's deltas (a retry or a second execution of the same attempt is ignored).
Before it commits nothing has been sent, so an error answer is an HTTP error with its
status, and a call that failed before its first delta is invisible. After it commits:

* the call's ``ok`` end: the finish reason, the usage chunk when asked
  (``stream_options.include_usage``), then ``data: [DONE]``;
* its ``failed`` end: the request goes on in the log (the router retries as for any
  ``bad_response``), and so does the stream: the first delta of a later attempt's call
  whose ``offset`` is the length of the text sent (it continues it: mid-stream
  failover, app/execution/continuation.py) is followed from then on. A stream that
  sent a tool call or a refusal cannot be continued: an error event
  (``data: {"error": ...}``, which the SDKs raise), its answer fetched by id;
* the request's answer arriving first (the call's end marker lost with its worker, or
  behind the answer's copy on the replies topic): the rest of the answer when what was
  sent is the start of it (its text, and its tool calls' fragments: the rest of their
  arguments, then the calls not begun), else an error event.

An answer that arrives with no delta at all (a call that did not stream) is sent as
chunks built from the whole answer.

Every event carries an ``id:``: the number of characters (code points) of the answer's
text the client has once it got the event (0 for the role chunk; the finish, usage and
``[DONE]`` events repeat the last). A resumed stream (``resume_after``: the client's
``Last-Event-ID``) is the same relay fed from the log: it sends no role chunk, holds back
the first ``resume_after`` characters of the text and sends what follows, so what the
client reads after the cut continues what it had, byte for byte, across a failover too.
A resumed stream that carries a tool call or a refusal ends with an error event (its
answer is fetched whole, ``GET /v1/chat/completions/{id}``).

What the client gets is decided here; how it is written is a :class:`Frames`: OpenAI's
chunks (app/gateway/chunks.py, the default) or another API's events (Anthropic's
Messages, app/gateway/anthropic/), so every format shares the commit, failover and
resume logic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from app.contract import Response, StreamDelta
from app.execution.pieces import merge_tool_call
from app.gateway import shape
from app.gateway.chunks import STREAM_INTERRUPTED as STREAM_INTERRUPTED
from app.gateway.chunks import ChatChunks
from app.gateway.errors import GatewayError, from_error_body, invalid, no_answer_in_time

#: Why a resumed stream cannot go on.
NOT_RESUMABLE = "a stream with a tool call or a refusal cannot be resumed"


class Frames(Protocol):
    """How a relayed stream is written: the server-sent events of one API. ``pos``: the
    characters of the answer's text the client has once it got the event (its ``id:``)."""

    def begin(self, model: str) -> list[bytes]:
        """The stream's opening, once committed to a call of ``model``."""
        ...

    def rename(self, model: str) -> None:
        """Another deployment's model goes on with the stream (a failover)."""
        ...

    def adopt(self, response: Response) -> None:
        """A resumed stream is written as ``response`` (its whole answer) names it."""
        ...

    def text(self, text: str, pos: int) -> list[bytes]: ...

    def tool_calls(self, calls: list[dict[str, Any]], pos: int) -> list[bytes]:
        """OpenAI ``tool_calls`` delta entries (with ``index``)."""
        ...

    def refusal(self, refusal: str, pos: int) -> list[bytes]: ...

    def finish(self, finish_reason: str | None, usage: Any, pos: int) -> list[bytes]:
        """The end of a stream that is the answer (OpenAI's finish reason and usage)."""
        ...

    def error(self, message: str, pos: int) -> bytes:
        """The event that ends a stream that cannot end as an answer."""
        ...

    def whole(self, response: Response) -> tuple[list[bytes], int]:
        """An answer that came whole (no delta before it): its events, its text's length."""
        ...


@dataclass
class Step:
    """What to do for one item: open the stream with ``headers``, write ``frames``, or
    answer with ``error`` (only before anything was sent)."""

    headers: dict[str, str] | None = None
    frames: list[bytes] = field(default_factory=list)
    error: GatewayError | None = None


class Relay:
    def __init__(
        self,
        request_id: str,
        include_usage: bool = False,
        created: int = 0,
        resume_after: int | None = None,
        frames: Frames | None = None,
    ) -> None:
        self.request_id = request_id
        #: A resumed stream: the characters of text the client already has.
        self.resume_after = resume_after
        #: Characters of the answer's text relayed so far (held back ones included): the
        #: ``id:`` of the events.
        self._pos = 0
        #: How the stream is written (default: OpenAI's chunks).
        self.out: Frames = frames or ChatChunks(request_id, include_usage, created)
        #: (attempt, call id) of the call the client sees, once committed.
        self.call: tuple[int, str] | None = None
        self.done = False
        self._next_seq = 0
        self._sent: list[str] = []
        self._sent_other = False  # tool calls or refusal sent
        self._refused = False  # a refusal sent
        #: The tool calls sent, by index, their fragments put together.
        self._calls: dict[int, dict[str, Any]] = {}
        #: The committed call's stream broke: the next attempt's call that goes on
        #: from the text sent is followed instead (mid-stream failover).
        self._resuming = False

    def take(self, item: StreamDelta | Response) -> Step:
        if self.done:
            return Step()
        if isinstance(item, Response):
            return self._answer(item)
        if self.call is None:
            return self._commit(item) if item.seq == 0 else Step()
        if self._resuming and self._continues(item):
            self._resuming = False
            self.call, self._next_seq = (item.attempt, item.call_id), 0
            self.out.rename(item.deployment.partition(":")[2] or item.deployment)
        if (item.attempt, item.call_id) != self.call or item.seq < self._next_seq:
            return Step()  # another call, or a copy already sent
        return Step(frames=self._frames(item))

    def timed_out(self, waited_s: float) -> Step:
        """No answer within the wait (``waited_s``), none on ``llm.responses`` either: a 504
        with a retry hint when nothing was sent yet."""
        self.done = True
        if self.call is None:
            return Step(error=no_answer_in_time(self.request_id, waited_s))
        return Step(frames=[self._error_frame("no end of the stream in time")])

    def _commit(self, delta: StreamDelta) -> Step:
        self.call = (delta.attempt, delta.call_id)
        opening = self.out.begin(delta.deployment.partition(":")[2] or delta.deployment)
        headers = {
            "x-switchyard-request-id": self.request_id,
            "x-switchyard-deployment": delta.deployment,
            "x-switchyard-attempts": str(delta.attempt),
        }
        if self.resume_after is not None:  # the client has the role chunk already
            return Step(headers=headers, frames=self._frames(delta))
        return Step(headers=headers, frames=[*opening, *self._frames(delta)])

    def _frames(self, delta: StreamDelta) -> list[bytes]:
        self._next_seq = delta.seq + 1
        frames = []
        if delta.content:
            self._sent.append(delta.content)
            frames += self._content(delta.content)
        if self.resume_after is not None and (delta.tool_calls or delta.refusal):
            return [*frames, self._error_frame(NOT_RESUMABLE)]
        if delta.tool_calls:
            frames += self.out.tool_calls(delta.tool_calls, self._pos)
        if delta.refusal:
            frames += self.out.refusal(delta.refusal, self._pos)
        self._sent_other = self._sent_other or bool(delta.tool_calls or delta.refusal)
        self._refused = self._refused or bool(delta.refusal)
        for fragment in delta.tool_calls or []:
            merge_tool_call(self._calls, fragment)
        if delta.end == "ok":
            frames += self._finish(delta.finish_reason, delta.usage)
        elif delta.end == "failed" and self._sent_other:
            frames.append(self._error_frame(f"the provider's stream broke ({delta.error})"))
        elif delta.end == "failed":
            self._resuming = True  # the request goes on: so does the client's stream
        return frames

    def _continues(self, delta: StreamDelta) -> bool:
        """A later attempt's first delta that goes on exactly where the text sent ends."""
        assert self.call is not None
        sent = sum(len(text) for text in self._sent)
        return delta.seq == 0 and delta.attempt > self.call[0] and delta.offset == sent

    def _answer(self, response: Response) -> Step:
        self.done = True
        if self.call is None and response.status == "ok":
            return self._whole(response)
        if self.call is None:
            error = from_error_body(response.error)
            error.extra_headers.update(shape.headers_of(response))
            return Step(error=error)
        found = self._rest_of(response)
        if found is None:
            why = ""
            if response.status == "ok":
                why = (
                    "the answer does not go on from the text sent"
                    if self._resuming
                    else "the call the stream came from did not end"
                )
            why = why or (response.error.message if response.error else "error")
            return Step(frames=[self._error_frame(why)])
        if self._resuming and response.deployment:  # another call answered: name it
            self.out.rename(response.deployment.partition(":")[2] or response.deployment)
        completion = shape.completion_of(response)
        first = (completion.get("choices") or [{}])[0]
        message = first.get("message") or {}
        rest, calls = found
        frames = self._content(rest) if rest else []
        if self.resume_after is not None and (message.get("tool_calls") or message.get("refusal")):
            return Step(frames=[*frames, self._error_frame(NOT_RESUMABLE)])
        for call in calls:
            frames += self.out.tool_calls([call], self._pos)
        return Step(
            frames=frames + self._finish(first.get("finish_reason"), completion.get("usage"))
        )

    def _rest_of(self, response: Response) -> tuple[str, list[dict[str, Any]]] | None:
        """What the answer adds to what was sent (its text, and its tool calls as
        ``tool_calls`` entries), when it is the same call's answer and goes on from it."""
        assert self.call is not None
        other_call = response.attempts != self.call[0] and not self._resuming
        if response.status != "ok" or other_call or self._refused:
            return None
        message = (shape.completion_of(response).get("choices") or [{}])[0].get("message") or {}
        content = message.get("content")
        content = content if isinstance(content, str) else ""
        sent = "".join(self._sent)
        calls = self._calls_after(message.get("tool_calls"))
        if not content.startswith(sent) or calls is None:
            return None
        return content[len(sent) :], calls

    def _calls_after(self, calls: Any) -> list[dict[str, Any]] | None:
        """The answer's tool calls after the fragments sent of them: a call not begun
        whole, one begun the rest of its arguments; None when they do not go on from
        what was sent (another id or name, other arguments, a call the answer lacks)."""
        calls = [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
        if any(index >= len(calls) for index in self._calls):
            return None
        rest: list[dict[str, Any]] = []
        for index, call in enumerate(calls):
            sent = self._calls.get(index)
            if sent is None:
                rest.append({"index": index, **call})
                continue
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            name, arguments = function.get("name") or "", function.get("arguments") or ""
            sent_arguments = sent["function"]["arguments"]
            if (
                sent["id"] not in (None, call.get("id"))
                or sent["function"]["name"] != name
                or not arguments.startswith(sent_arguments)
            ):
                return None
            if len(arguments) > len(sent_arguments):
                more = {"arguments": arguments[len(sent_arguments) :]}
                rest.append({"index": index, "function": more})
        return rest

    def _whole(self, response: Response) -> Step:
        """A whole answer with no delta before it: chunks built from it (a resumed stream:
        its text after what the client has, then the end)."""
        headers = shape.headers_of(response)
        if self.resume_after is None:
            frames, self._pos = self.out.whole(response)
            return Step(headers=headers, frames=frames)
        completion = shape.completion_of(response)
        self.out.adopt(response)
        first = (completion.get("choices") or [{}])[0]
        message = first.get("message") or {}
        text = shape.text_of(message.get("content"))
        if message.get("tool_calls") or message.get("refusal"):
            why = f"{NOT_RESUMABLE}; its answer at GET /v1/chat/completions/{self.request_id}"
            return Step(error=GatewayError(409, why, "stream_not_resumable"))
        if len(text) < self.resume_after:
            return Step(error=beyond_the_answer(self.resume_after, len(text)))
        frames = self._content(text) if text else []
        frames += self._finish(first.get("finish_reason"), completion.get("usage"))
        return Step(headers=headers, frames=frames)

    def _content(self, text: str) -> list[bytes]:
        """The chunk of ``text`` (the next of the answer's text), but for what a resumed
        stream's client already has."""
        start, self._pos = self._pos, self._pos + len(text)
        held = self.resume_after or 0
        if self._pos <= held:
            return []
        return self.out.text(text[max(0, held - start) :], self._pos)

    def _finish(self, finish_reason: str | None, usage: Any) -> list[bytes]:
        self.done = True
        if self.resume_after is not None and self._pos < self.resume_after:
            why = beyond_the_answer(self.resume_after, self._pos).message
            return [self._error_frame(why)]
        return self.out.finish(finish_reason, usage, self._pos)

    def _error_frame(self, why: str) -> bytes:
        self.done = True
        message = (
            f"the stream was interrupted: {why}; the request goes on in the log, its answer "
            f"at GET /v1/switchyard/requests/{self.request_id}"
        )
        return self.out.error(message, self._pos)


def beyond_the_answer(resume_after: int, length: int) -> GatewayError:
    """A ``Last-Event-ID`` past the end of the answer's text."""
    message = f"Last-Event-ID: {resume_after} is beyond the answer's {length} characters"
    return invalid(message, "invalid_last_event_id")
