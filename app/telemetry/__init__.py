"""OpenTelemetry tracing of a request's way: the gateway, ingest, routing, provider calls.

Off unless an exporter is configured by the standard ``OTEL_*`` variables
(:func:`app.telemetry.setup.configure`, docs/operations.md "Tracing (OpenTelemetry)").
Off, every hook here is one test of a module global (:data:`app.telemetry.state.tracer`)
and nothing else: no span, no attribute, no context.

Spans carry identifiers, counts, names of deployments and rules, token counts and
error classes; never prompt or completion text, never a key. Nothing here is read by a
decision: the trace context a request carries is no input of the fold, so replay is the
same with tracing on or off.
"""
