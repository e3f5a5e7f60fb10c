"""A piece of a streamed answer, on ``switchyard.deltas``.

With ``stream: true`` the executor streams from the provider and publishes what each
call's stream adds as ``response.delta`` events, in order (``seq``), while it comes: the
one event type that carries completion text outside ``llm.responses``, since it *is*
the response stream (never in decisions, outcomes, feedback or metrics).

Each call of an attempt (``call_id``: the same attempt can be called twice after a
crash) publishes its own sequence; its last event says how it ended (``end``). A
call publishes its first event only once the provider's stream carried some of the
answer (text, a tool call, a refusal), so a stream that fails before that leaves no
delta and the retry's deltas are the first a gateway sees (docs/gateway.md, "The
streaming rule"). :func:`app.audit.streams.reassemble` puts every stream back together.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from app.contract.base import Envelope, derived_id

#: How a call's stream ended, on its last delta: ``ok`` (the call is the request's answer,
#: already on ``llm.responses``) or ``failed`` (it broke after earlier deltas).
StreamEnd = Literal["ok", "failed"]


class StreamDelta(Envelope):
    """What one call's stream added since its previous delta (text may be empty)."""

    type: Literal["response.delta"] = "response.delta"
    request_id: Annotated[str, Field(min_length=1, max_length=200)]
    attempt: Annotated[int, Field(ge=1)]
    #: One call of the attempt (an executor's; a re-made call after a crash has another).
    call_id: Annotated[str, Field(min_length=1, max_length=64)]
    #: 0, 1, 2 ... within the call.
    seq: Annotated[int, Field(ge=0)]
    #: Characters of the answer before this call's first text: 0, or, for a call that
    #: continues a broken stream, the length of the text the client already has.
    offset: Annotated[int, Field(ge=0)] = 0
    #: ``provider:model``.
    deployment: str
    #: The text added (the pieces of ``choices[0].delta.content``, joined).
    content: str = ""
    #: ``choices[0].delta.tool_calls`` entries as the provider sent them (with ``index``).
    tool_calls: list[dict[str, Any]] | None = None
    refusal: str | None = None
    #: On the call's last delta only.
    end: StreamEnd | None = None
    finish_reason: str | None = None
    #: The provider's ``usage`` (token counts), on an ``ok`` end.
    usage: dict[str, Any] | None = None
    #: Why a ``failed`` stream failed (the outcome's status class and error: fixed words).
    error: str | None = None


def delta_id(request_id: str, attempt: int, call_id: str, seq: int) -> str:
    """A delta's id: the same for a re-sent copy of it."""
    return derived_id("delta", request_id, attempt, call_id, seq)
