"""The process's tracer: None while tracing is off (the hooks then do nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer, TracerProvider

#: Instrumentation scope of every span Switchyard makes.
SCOPE = "switchyard"

#: Set by :func:`use` (the process's configuration, or a test's provider).
tracer: Tracer | None = None


def use(provider: TracerProvider | None) -> None:
    """Make spans with ``provider`` from now on (None: tracing off)."""
    global tracer
    tracer = None if provider is None else provider.get_tracer(SCOPE)
