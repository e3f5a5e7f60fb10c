"""One trace from the gateway to the provider call, on the embedded stack.

The gateway runs in this process and traces into the SDK's InMemorySpanExporter. The
worker runs in a child process, so its spans are exported the way a deployment's are:
by the ``OTEL_*`` variables (the OTLP/HTTP exporter) to a small OTLP receiver in this test
(an aiohttp route decoding the protobuf ``ExportTraceServiceRequest``). Whatever either
side exported is searched for the prompt and the answer: neither is in any span.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from stack_helpers import LocalServer, provider_and_gateway, publish

from app.embedded.broker import EmbeddedBroker
from app.embedded.stack import EmbeddedStack
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway
from app.telemetry import state

pytestmark = pytest.mark.broker

KEY = "sk-test-tracing-" + "t" * 20
PROMPT = "tracing-prompt-text-that-no-span-may-hold"
ANSWER = "tracing-answer-text-that-no-span-may-hold"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
#: OTLP's span kinds (opentelemetry/proto/trace/v1/trace.proto).
INTERNAL, SERVER, CLIENT, CONSUMER = 1, 2, 3, 5


@dataclass
class Exported:
    """A span as the worker exported it over OTLP."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    service: str
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class Receiver(LocalServer):
    """An OTLP/HTTP traces endpoint (``POST /v1/traces``, protobuf)."""

    def __init__(self) -> None:
        super().__init__([("/v1/traces", self._traces)])
        self.spans: list[Exported] = []
        self.bodies: list[bytes] = []

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.bodies.append(body)
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        Exported(
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.name,
                            span.kind,
                            str(resource.get("service.name")),
                            {a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        reply = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")

    async def wait(
        self, found: Callable[[list[Exported]], bool], timeout_s: float = 45.0
    ) -> list[Exported]:
        deadline = time.monotonic() + timeout_s
        while not found(self.spans) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return list(self.spans)


async def _answer(request: web.Request) -> web.Response:
    body = await request.json()
    message = {"role": "assistant", "content": ANSWER}
    return web.json_response(
        {
            "id": "chatcmpl-tracing",
            "object": "chat.completion",
            "created": 1,
            "model": f"{body['model']}-2025",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
        }
    )


def _config(base_url: str) -> str:
    document = {
        "providers": [
            {"id": "mock", "base_url": f"{base_url}/v1", "models": [{"name": "m1"}],
             "max_concurrency": 10, "timeout_ms": 5000},
        ],
        "routes": {"chat": {"providers": ["mock"]}},
        "default_route": "chat",
        "gateway_keys": [{"sha256": hash_key(KEY), "name": "tracing"}],
    }  # fmt: skip
    return str(yaml.safe_dump(document, sort_keys=False))


@dataclass
class Traced:
    stack: EmbeddedStack
    gateway: RunningGateway
    receiver: Receiver
    memory: InMemorySpanExporter

    async def ask(self, request_id: str, headers: dict[str, str] | None = None) -> Any:
        body = {"model": "chat", "messages": [{"role": "user", "content": PROMPT}]}
        sent = {"Authorization": f"Bearer {KEY}", "x-switchyard-request-id": request_id}
        async with httpx.AsyncClient(trust_env=False) as client:
            reply = await client.post(
                f"{self.gateway.url}/v1/chat/completions",
                json=body,
                headers={**sent, **(headers or {})},
                timeout=60,
            )
        assert reply.status_code == 200, reply.text
        return reply.json()

    async def worker_spans(self, request_id: str) -> list[Exported]:
        """The worker's ingest, routing and call spans of a request, once all came."""

        def of(spans: list[Exported]) -> list[Exported]:
            return [s for s in spans if s.attributes.get("switchyard.request.id") == request_id]

        spans = await self.receiver.wait(lambda spans: len(of(spans)) >= 3)
        return of(spans)


@pytest.fixture(scope="module")
async def traced(broker: EmbeddedBroker) -> AsyncIterator[Traced]:
    receiver = await Receiver().start()
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "switchyard-gateway"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    state.use(provider)  # the gateway, in this process
    env = {  # the worker, a child process: the standard variables
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.url}/v1/traces",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    try:
        async with provider_and_gateway(
            broker, [("/v1/chat/completions", _answer)], _config, env=env
        ) as (stack, gateway):
            yield Traced(stack, gateway, receiver, memory)
    finally:
        state.use(None)
        provider.shutdown()
        await receiver.stop()


def _by_name(spans: list[Exported]) -> dict[str, Exported]:
    named = {s.name.split(" ")[0]: s for s in spans}
    assert len(named) == len(spans), [s.name for s in spans]  # one of each
    return named


def _assert_no_text(traced: Traced) -> None:
    exported = b"".join(traced.receiver.bodies)
    memory = "".join(span.to_json() for span in traced.memory.get_finished_spans())
    for text in (PROMPT, ANSWER):
        assert text.encode() not in exported
        assert text not in memory


async def test_one_trace_from_the_client_through_the_gateway_to_the_provider_call(
    traced: Traced,
) -> None:
    request_id = f"traced-{uuid.uuid4().hex[:8]}"
    header = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    answer = await traced.ask(request_id, header)
    assert answer["choices"][0]["message"]["content"] == ANSWER
    (gateway,) = [
        s
        for s in traced.memory.get_finished_spans()
        if (s.attributes or {}).get("switchyard.request.id") == request_id
    ]
    assert gateway.name == "POST /v1/chat/completions"
    assert gateway.kind is SpanKind.SERVER
    assert f"{gateway.context.trace_id:032x}" == CLIENT_TRACE
    assert gateway.parent is not None and f"{gateway.parent.span_id:016x}" == CLIENT_SPAN
    assert (gateway.attributes or {})["http.response.status_code"] == 200
    gateway_span = f"{gateway.context.span_id:016x}"

    spans = _by_name(await traced.worker_spans(request_id))
    assert set(spans) == {"process", "route", "chat"}
    for span in spans.values():  # one trace: children of the gateway's span
        assert (span.trace_id, span.parent_id) == (CLIENT_TRACE, gateway_span)
        assert span.service == "switchyard-worker"  # configured by the OTEL_* variables
    assert [spans[n].kind for n in ("process", "route", "chat")] == [CONSUMER, INTERNAL, CLIENT]
    route = spans["route"].attributes
    assert route["switchyard.route"] == "chat"
    assert route["switchyard.decision.candidates"] == 1
    assert route["switchyard.decision.rule"]
    call = spans["chat"]
    assert call.name == "chat m1"
    assert {k: v for k, v in call.attributes.items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "mock",
        "gen_ai.system": "mock",
        "gen_ai.request.model": "m1",
        "gen_ai.request.stream": False,
        "gen_ai.response.model": "m1-2025",
        "gen_ai.response.id": "chatcmpl-tracing",
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": 5,
    }
    assert call.attributes["server.address"] == "127.0.0.1"
    assert "error.type" not in call.attributes
    _assert_no_text(traced)


async def test_without_a_client_context_the_gateway_s_span_is_the_root(traced: Traced) -> None:
    request_id = f"rooted-{uuid.uuid4().hex[:8]}"
    await traced.ask(request_id)
    (gateway,) = [
        s
        for s in traced.memory.get_finished_spans()
        if (s.attributes or {}).get("switchyard.request.id") == request_id
    ]
    assert gateway.parent is None
    spans = await traced.worker_spans(request_id)
    assert {s.trace_id for s in spans} == {f"{gateway.context.trace_id:032x}"}
    assert {s.parent_id for s in spans} == {f"{gateway.context.span_id:016x}"}
    _assert_no_text(traced)


async def test_a_request_published_without_context_gets_a_trace_of_its_own(
    traced: Traced,
) -> None:
    ids = [f"direct-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    await publish(
        traced.stack,
        [
            {"request_id": i, "model": "chat", "messages": [{"role": "user", "content": PROMPT}]}
            for i in ids
        ],
    )
    traces = []
    for request_id in ids:
        spans = _by_name(await traced.worker_spans(request_id))
        ingest = spans["process"]
        assert ingest.parent_id == ""  # the root: ingest started the trace
        assert ingest.attributes["messaging.destination.name"] == traced.stack.topics.requests
        for name in ("route", "chat"):
            assert (spans[name].trace_id, spans[name].parent_id) == (
                ingest.trace_id,
                ingest.span_id,
            )
        assert spans["chat"].attributes["gen_ai.usage.output_tokens"] == 5
        traces.append(ingest.trace_id)
    assert len(set(traces)) == 2  # a trace each, no other request's
    _assert_no_text(traced)
