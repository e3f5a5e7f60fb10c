"""Mid-stream failover end to end: the official ``openai`` SDK streams through the
gateway and the embedded stack from a provider whose stream breaks after 40 of its 60
tokens (cut, stalled, a malformed chunk); the request goes on on a fallback model and
the client's stream goes on where it stopped. The client reads the whole canonical
answer byte for byte, from a fallback that continues a prefill and from one that
refuses prefills (it restarts and the repeated text is held back)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import openai
import pytest
import yaml
from stack_helpers import fault_provider, fault_scenario, stack_and_gateway

from app.embedded.broker import EmbeddedBroker
from app.gateway.keys import hash_key
from app.gateway.run import RunningGateway
from bench.fault_answer import canonical_text
from bench.fault_provider import FaultOptions
from bench.faults import model_switch

pytestmark = pytest.mark.broker

KEY = "sk-test-failover-" + "f" * 20
BROKEN = ("stream_cut", "stream_stall", "malformed_chunk")
#: The fallbacks: ``ok`` continues a prefill; ``rejects_prefill`` answers it with a 400
#: (then restarts: the executor learns it), declared ``prefill: true`` to be asked.
FALLBACKS = {"prefill": "ok", "restart": "rejects_prefill"}


def _config(base_url: str) -> str:
    providers = [fault_scenario(base_url, s) for s in BROKEN]
    providers += [fault_scenario(base_url, s, prefill=True) for s in FALLBACKS.values()]
    routes = {p["id"]: {"providers": [p["id"]]} for p in providers}
    names = [f"{s}.{kind}" for s in BROKEN for kind in FALLBACKS]
    # A request for model ``scenario.kind`` goes to the scenario, falling back to ``kind``'s.
    switch = {
        f"{s}.{kind}": (s.replace("_", "-"), FALLBACKS[kind].replace("_", "-"))
        for s in BROKEN
        for kind in FALLBACKS
    }
    nodes = model_switch(switch, "ok")
    document = {
        "providers": providers,
        "routes": {**routes, **{name: {"providers": ["ok"]} for name in names}},
        "default_route": "ok",
        "dynamic_routes": {
            "failover": {
                "bind": [{"api_key": "failover"}],
                "start": f"is-{names[0]}",
                "nodes": nodes,
            }
        },
        "gateway_keys": [{"sha256": hash_key(KEY), "name": "failover"}],
    }
    return str(yaml.safe_dump(document, sort_keys=False))


class Env:
    def __init__(self, gateway: RunningGateway) -> None:
        self.gateway = gateway

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.gateway.url}/v1", api_key=KEY, max_retries=0, timeout=40
        )


@pytest.fixture(scope="module")
async def env(broker: EmbeddedBroker) -> AsyncIterator[Env]:
    env = {"SWITCHYARD_REQUEST_DEADLINE_S": "40"}
    async with fault_provider(FaultOptions(token_s=0.002)) as base_url:
        config = _config(base_url)
        async with stack_and_gateway(broker, "f", providers_yaml=config, env=env) as (_, gateway):
            yield Env(gateway)


@pytest.mark.parametrize("kind", list(FALLBACKS))
@pytest.mark.parametrize("scenario", BROKEN)
async def test_a_stream_broken_mid_answer_goes_on_byte_for_byte(
    env: Env, scenario: str, kind: str
) -> None:
    messages = [{"role": "user", "content": f"failover {scenario} {kind} {uuid.uuid4().hex}"}]
    raw = await env.client().chat.completions.with_raw_response.create(
        model=f"{scenario}.{kind}",
        messages=messages,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in raw.parse()]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == canonical_text(messages)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert raw.headers["x-switchyard-attempts"] == "1"  # the stream began on the primary
    # The chunks after the failover name the model that answered them.
    assert chunks[-2].model == FALLBACKS[kind]
