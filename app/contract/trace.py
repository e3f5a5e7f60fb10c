"""W3C trace context on a request: where its trace is, never what it says.

A request on ``llm.requests`` may carry the `W3C Trace Context
<https://www.w3.org/TR/trace-context/>`_ of the operation that sent it: ``traceparent``
(version ``00``: trace id, parent span id, flags) and ``tracestate`` (vendors'
``key=value`` list). The gateway sets them from its own span; a platform publishing
directly may set them from its own. The worker's spans (routing, provider calls) are
then children of that span, in the same trace (docs/operations.md, "Tracing").

They are identifiers, not content, and no decision reads them: replay folds the same
way with or without them. Left out of a record when absent (not ``null``), so a log
written without tracing is byte for byte what it was before these fields existed.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

#: ``00-{trace id: 32 hex}-{parent span id: 16 hex}-{flags: 2 hex}``, lower case.
TRACEPARENT_PATTERN = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
_MEMBER = r"[a-z0-9][a-z0-9_*/@-]*=[ -+\--<>-~]*[!-+\--<>-~]"
#: Comma-separated ``key=value`` members (keys lower case; values printable ASCII without
#: ``,`` and ``=``, not ending in a space), as the W3C header has them.
TRACESTATE_PATTERN = rf"^{_MEMBER}(?:[ \t]*,[ \t]*{_MEMBER})*$"
#: The W3C limit on a tracestate header a vendor must pass on.
TRACESTATE_MAX_CHARS = 512


def _ids_set(value: str) -> str:
    """A trace id or parent id of all zeros is invalid (the W3C says so)."""
    _, trace_id, parent_id, _ = value.split("-")
    if not trace_id.strip("0") or not parent_id.strip("0"):
        raise ValueError("traceparent: a trace id or parent id of all zeros is invalid")
    return value


TraceParent = Annotated[
    str, Field(pattern=TRACEPARENT_PATTERN, max_length=55), AfterValidator(_ids_set)
]
TraceState = Annotated[
    str, Field(min_length=3, max_length=TRACESTATE_MAX_CHARS, pattern=TRACESTATE_PATTERN)
]


def _absent(value: object) -> bool:
    return value is None


def trace_field() -> Any:
    """A trace field of a request: optional, and left out of the record when absent."""
    return Field(default=None, exclude_if=_absent)
