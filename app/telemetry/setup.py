"""Tracing configured by the standard ``OTEL_*`` variables, read once at start.

Tracing is on when an exporter is asked for: ``OTEL_TRACES_EXPORTER`` names one or more
(``otlp``, ``console``, or any installed ``opentelemetry_traces_exporter`` entry point),
or, with it unset, ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) says
where OTLP goes. Otherwise, and with ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``, it is off and the SDK is not even imported. (The SDK's own
default, OTLP to localhost when nothing is set, is not taken: a process nobody asked to
trace sends nothing.)

Everything else is the SDK's: the exporters read their ``OTEL_EXPORTER_OTLP_*`` (endpoint,
headers, timeout, compression, certificates), the batch processor ``OTEL_BSP_*``, the
provider ``OTEL_TRACES_SAMPLER`` / ``_ARG`` and the span limits, the resource
``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``. ``otlp`` is OTLP over HTTP/protobuf
(the specification's default protocol; ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` needs
``opentelemetry-exporter-otlp-proto-grpc`` installed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from app.telemetry import state

#: Where the SDK finds span exporters by name (``OTEL_TRACES_EXPORTER``).
EXPORTER_GROUP = "opentelemetry_traces_exporter"
#: ``otlp``'s exporter for each ``OTEL_EXPORTER_OTLP_PROTOCOL``.
OTLP_BY_PROTOCOL = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}
DEFAULT_PROTOCOL = "http/protobuf"


class TracingConfigError(ValueError):
    """An ``OTEL_*`` variable asks for what cannot be had (names the variable)."""


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The exporters the environment asks for; empty: tracing off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    asked = environ.get("OTEL_TRACES_EXPORTER")
    if asked is None:
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        return ["otlp"] if endpoint else []
    names = [name.strip() for name in asked.split(",")]
    return [name for name in names if name and name.lower() != "none"]


def entry_point_name(name: str, environ: Mapping[str, str]) -> str:
    """The entry point of exporter ``name``: ``otlp`` by the protocol variables."""
    if name != "otlp":
        return name
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or DEFAULT_PROTOCOL
    ).strip()
    if protocol not in OTLP_BY_PROTOCOL:
        known = ", ".join(OTLP_BY_PROTOCOL)
        raise TracingConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: one of {known}")
    return OTLP_BY_PROTOCOL[protocol]


def exporter(name: str, environ: Mapping[str, str]) -> Any:
    """A new exporter ``name`` (configured by its own ``OTEL_*`` variables)."""
    point = entry_point_name(name, environ)
    found = list(entry_points(group=EXPORTER_GROUP, name=point))
    if not found:
        installed = sorted(e.name for e in entry_points(group=EXPORTER_GROUP))
        hint = " (pip install opentelemetry-exporter-otlp-proto-grpc)" if "grpc" in point else ""
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER={name!r}: no exporter {point!r}{hint}; "
            f"installed: {', '.join(installed)}"
        )
    return found[0].load()()


def configure(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Trace this process when the environment asks for an exporter; whether it does.

    ``service_name``: the resource's ``service.name`` unless ``OTEL_SERVICE_NAME`` (or
    ``OTEL_RESOURCE_ATTRIBUTES``) names one. The provider becomes the global one too, so
    other instrumentation a deployment adds lands in the same pipeline; it is flushed and
    shut down at exit (the SDK's own ``atexit``).
    """
    environ = os.environ if environ is None else environ
    names = exporter_names(environ)
    if not names:
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporters = [exporter(name, environ) for name in names]
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)  # sampler and limits: OTEL_TRACES_SAMPLER ...
    for each in exporters:
        provider.add_span_processor(BatchSpanProcessor(each))
    trace.set_tracer_provider(provider)
    state.use(provider)
    return True
