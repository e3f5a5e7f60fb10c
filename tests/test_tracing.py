"""Tracing without a broker: the trace fields of the contract, the ``OTEL_*`` choice of
exporters, and the spans of ingest, routing and provider calls (InMemorySpanExporter)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from factories import abc, accepted, fold
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import ValidationError

from app.contract import ChatRequest, Dispatch, RequestAccepted, StatusClass
from app.execution.outcome import CallResult
from app.telemetry import spans, state
from app.telemetry.setup import TracingConfigError, configure, exporter, exporter_names

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"
PROMPT = "a-prompt-that-must-stay-out-of-every-span"
ANSWER = "an-answer-that-must-stay-out-of-every-span"


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    state.use(provider)
    try:
        yield memory
    finally:
        state.use(None)


def _with_trace(event: RequestAccepted, traceparent: str | None) -> RequestAccepted:
    request = event.request.model_copy(update={"traceparent": traceparent})
    return event.model_copy(update={"request": request})


def _dispatch(traceparent: str | None = PARENT) -> Dispatch:
    event = _with_trace(accepted("r1", content=PROMPT), traceparent)
    return fold([event], abc()).steps[0].dispatches[0]


def _text(found: list[ReadableSpan]) -> str:
    return "\n".join(span.to_json() for span in found)


# --------------------------------------------------------------------------- the contract


def test_the_trace_fields_are_checked_and_left_out_when_absent() -> None:
    base = {"request_id": "r", "messages": [{"role": "user", "content": "x"}]}
    plain = ChatRequest.model_validate(base)
    assert "trace" not in plain.model_dump_json()  # a log without tracing: the same bytes
    traced = ChatRequest.model_validate(
        {**base, "traceparent": PARENT, "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}
    )
    assert json.loads(traced.model_dump_json())["traceparent"] == PARENT
    bad = [
        {"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"},  # all-zero trace id
        {"traceparent": f"00-{TRACE_ID}-" + "0" * 16 + "-01"},  # all-zero parent id
        {"traceparent": PARENT.upper()},
        {"traceparent": "ff" + PARENT[2:]},
        {"traceparent": "hello"},
        {"tracestate": "Upper=1"},
        {"tracestate": "a=b,"},
        {"tracestate": "a=" + "x" * 600},
    ]
    for fields in bad:
        with pytest.raises(ValidationError):
            ChatRequest.model_validate({**base, **fields})


def test_the_trace_context_is_no_input_of_a_decision() -> None:
    without = _dispatch(None)
    with_it = _dispatch(PARENT)
    assert with_it.decision == without.decision
    assert with_it.accepted.request.traceparent == PARENT


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("environ", "names"),
    [
        ({}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, []),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "TRUE"}, []),
    ],
)
def test_tracing_is_on_only_when_an_exporter_is_asked_for(
    environ: dict[str, str], names: list[str]
) -> None:
    assert exporter_names(environ) == names


def test_nothing_asked_nothing_configured() -> None:
    assert configure("switchyard-test", {}) is False
    assert state.tracer is None


def test_otlp_is_http_protobuf_and_a_missing_exporter_is_named() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    made = exporter("otlp", {})
    assert isinstance(made, OTLPSpanExporter)
    with pytest.raises(TracingConfigError, match="opentelemetry-exporter-otlp-proto-grpc"):
        exporter("otlp", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(TracingConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        exporter("otlp", {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})
    with pytest.raises(TracingConfigError, match="OTEL_TRACES_EXPORTER='zipkin'"):
        exporter("zipkin", {})


def test_a_bad_exporter_stops_the_command_with_one_line() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "gateway"],
        env={"PATH": "/usr/bin:/bin", "OTEL_TRACES_EXPORTER": "zipkin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("switchyard: bad setting OTEL_TRACES_EXPORTER='zipkin'")


# --------------------------------------------------------------------------- spans


def test_off_every_hook_does_nothing() -> None:
    assert state.tracer is None
    event = accepted("r1")
    assert spans.ingested(event) is event
    dispatch = _dispatch()
    spans.decided([dispatch], time.perf_counter())
    with spans.provider_call(dispatch, "https://p.example", False) as call:
        call.ended(CallResult(StatusClass.SUCCESS, 200, 5.0))
    assert call.span is None


def test_ingest_gives_a_request_without_context_a_trace_of_its_own(
    exported: InMemorySpanExporter,
) -> None:
    first, second = accepted("r1", content=PROMPT), accepted("r2", content=PROMPT)
    stamped = [spans.ingested(first), spans.ingested(second)]
    found = exported.get_finished_spans()
    assert [s.kind for s in found] == [SpanKind.CONSUMER, SpanKind.CONSUMER]
    assert all(s.parent is None for s in found)  # roots
    assert found[0].context.trace_id != found[1].context.trace_id
    for span, event in zip(found, stamped, strict=True):
        assert event.request.traceparent == (
            f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}"
            f"-{span.context.trace_flags:02x}"
        )
        assert span.attributes is not None
        assert span.attributes["messaging.destination.name"] == "llm.requests"
        assert span.attributes["switchyard.request.id"] == event.request.request_id
    # Stamped, it serialises and validates as any request does.
    again = RequestAccepted.model_validate_json(stamped[0].model_dump_json())
    assert again.request.traceparent == stamped[0].request.traceparent
    assert PROMPT not in _text(list(found))


def test_ingest_keeps_a_request_s_own_context(exported: InMemorySpanExporter) -> None:
    event = _with_trace(accepted("r1"), PARENT)
    assert spans.ingested(event) is event
    (span,) = exported.get_finished_spans()
    assert span.parent is not None and span.parent.span_id == int(PARENT.split("-")[2], 16)
    assert f"{span.context.trace_id:032x}" == TRACE_ID


def test_a_decision_s_span_is_a_child_of_the_request_s_context(
    exported: InMemorySpanExporter,
) -> None:
    dispatch = _dispatch()
    spans.decided([dispatch], time.perf_counter() - 0.002)
    (span,) = exported.get_finished_spans()
    decision = dispatch.decision
    assert span.name == f"route {decision.route}"
    assert span.kind is SpanKind.INTERNAL
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None and span.parent.span_id == int(PARENT.split("-")[2], 16)
    assert span.end_time is not None and span.start_time is not None
    assert span.end_time - span.start_time >= 2_000_000
    assert dict(span.attributes or {}) == {
        "switchyard.request.id": "r1",
        "switchyard.attempt": 1,
        "switchyard.route": decision.route,
        "switchyard.deployment": decision.deployment,
        "switchyard.decision.id": decision.id,
        "switchyard.decision.rule": decision.selection_rule,
        "switchyard.decision.strategy": decision.strategy,
        "switchyard.decision.mode": decision.mode,
        "switchyard.decision.candidates": len(decision.candidates),
        "switchyard.decision.excluded": len(decision.excluded),
        "switchyard.policy.version": decision.policy_version,
        "switchyard.state.version": decision.state_version,
    }
    assert PROMPT not in _text(list(exported.get_finished_spans()))


def test_a_provider_call_span_follows_the_genai_conventions(
    exported: InMemorySpanExporter,
) -> None:
    dispatch = _dispatch()
    request = dispatch.accepted.request.model_copy(update={"max_tokens": 64, "temperature": 0.2})
    dispatch = dispatch.model_copy(
        update={"accepted": dispatch.accepted.model_copy(update={"request": request})}
    )
    completion = {
        "id": "chatcmpl-1",
        "model": "m1-2025",
        "choices": [{"message": {"role": "assistant", "content": ANSWER}}],
    }
    result = CallResult(
        StatusClass.SUCCESS, 200, 12.0, 7, 5, 2, "stop", completion, first_token_ms=40.0
    )
    with spans.provider_call(dispatch, "https://api.example.com:8443/v1", True) as call:
        call.ended(result)
    (span,) = exported.get_finished_spans()
    decision = dispatch.decision
    assert span.name == f"chat {decision.model}"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert span.parent is not None and f"{span.context.trace_id:032x}" == TRACE_ID
    attributes = dict(span.attributes or {})
    assert attributes | {"gen_ai.response.finish_reasons": None} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": decision.provider,
        "gen_ai.system": decision.provider,
        "gen_ai.request.model": decision.model,
        "gen_ai.request.stream": True,
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.temperature": 0.2,
        "server.address": "api.example.com",
        "server.port": 8443,
        "switchyard.request.id": "r1",
        "switchyard.attempt": 1,
        "switchyard.route": decision.route,
        "switchyard.deployment": decision.deployment,
        "switchyard.decision.id": decision.id,
        "switchyard.status_class": "success",
        "http.response.status_code": 200,
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 2,
        "gen_ai.response.finish_reasons": None,
        "gen_ai.response.time_to_first_chunk": 0.04,
        "gen_ai.response.model": "m1-2025",
        "gen_ai.response.id": "chatcmpl-1",
    }
    assert tuple(attributes["gen_ai.response.finish_reasons"]) == ("stop",)  # type: ignore[arg-type]
    text = _text(list(exported.get_finished_spans()))
    assert PROMPT not in text and ANSWER not in text


def test_a_failed_call_names_its_class_and_a_cancelled_one_its_exception(
    exported: InMemorySpanExporter,
) -> None:
    dispatch = _dispatch(None)
    failed = CallResult(StatusClass.RATE_LIMITED, 429, 3.0, error="HTTP 429 (rate_limited)")
    with spans.provider_call(dispatch, "http://10.0.0.5/v1", False) as call:
        call.ended(failed)
    with pytest.raises(TimeoutError), spans.provider_call(dispatch, "http://h/v1", False):
        raise TimeoutError
    first, second = exported.get_finished_spans()
    assert first.parent is None  # no context on the request: a trace of its own
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["error.type"] == "rate_limited"
    assert first.attributes["server.port"] == 80
    assert first.status.status_code is StatusCode.ERROR
    assert second.attributes["error.type"] == "TimeoutError"
    assert "gen_ai.usage.input_tokens" not in second.attributes
