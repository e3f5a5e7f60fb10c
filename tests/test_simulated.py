"""Simulated seed-003 providers: OpenAI response shape, reproducibility, fitted distributions."""

from __future__ import annotations

import random
import statistics
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml

from app.config.schema import parse_config
from app.embedded.simulated import (
    SEED_003_MODELS,
    Outcome,
    SimulatedModel,
    SimulatedProviders,
    demo_providers_yaml,
    draw,
    provider_rng,
    sample_latency_ms,
)

SCALE = 0.001  # 720 ms -> 0.72 ms of sleep
MESSAGES = [{"role": "user", "content": "x" * 400}]
GPT = "openai-gpt-4.1"


@pytest.fixture
async def sim() -> AsyncIterator[SimulatedProviders]:
    async with SimulatedProviders(seed=42, time_scale=SCALE) as providers:
        yield providers


async def _chat(client: httpx.AsyncClient, url: str, **extra: Any) -> httpx.Response:
    body = {"model": "gpt-4.1", "messages": MESSAGES, **extra}
    return await client.post(f"{url}/chat/completions", json=body)


async def _outcomes(sim: SimulatedProviders, pid: str, n: int) -> list[tuple[int, str]]:
    async with httpx.AsyncClient() as client:
        out = []
        for _ in range(n):
            r = await _chat(client, sim.base_url(pid))
            out.append((r.status_code, r.headers.get("x-simulated-latency-ms", "")))
        return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


async def test_response_is_openai_shaped(sim: SimulatedProviders) -> None:
    sim.set_success_rate(GPT, 1.0)
    async with httpx.AsyncClient() as client:
        r = await _chat(client, sim.base_url(GPT))
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert isinstance(body["created"], int)
    assert body["model"] == "gpt-4.1"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 100, "completion_tokens": 250, "total_tokens": 350}


async def test_max_tokens_caps_completion(sim: SimulatedProviders) -> None:
    sim.set_success_rate(GPT, 1.0)
    async with httpx.AsyncClient() as client:
        r = await _chat(client, sim.base_url(GPT), max_tokens=40)
        bad = await client.post(f"{sim.base_url(GPT)}/chat/completions", json={"messages": []})
        missing = await _chat(client, f"{sim.root_url}/nope/v1")
    assert r.json()["usage"]["completion_tokens"] == 40
    assert r.json()["choices"][0]["finish_reason"] == "length"
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert missing.status_code == 404


async def test_fixed_seed_repeats_the_sequence(sim: SimulatedProviders) -> None:
    pid = "deepseek-v3.2"
    sim.set_success_rate(pid, 0.6)  # plenty of failures in a short sequence
    first = await _outcomes(sim, pid, 30)
    sim.reset()
    again = await _outcomes(sim, pid, 30)
    assert first == again
    assert {code for code, _ in first} >= {200, 503}
    sim.reset(seed=43)
    assert await _outcomes(sim, pid, 30) != first


def test_draw_sequence_is_reproducible() -> None:
    model = SEED_003_MODELS[0]
    rng1, rng2 = provider_rng(1, GPT), provider_rng(1, GPT)
    seq1 = [draw(rng1, model) for _ in range(500)]
    seq2 = [draw(rng2, model) for _ in range(500)]
    assert seq1 == seq2
    assert seq1 != [draw(provider_rng(2, GPT), model) for _ in range(500)]


@pytest.mark.parametrize("model", SEED_003_MODELS, ids=lambda m: m.provider_id)
def test_latency_quantiles_match_table(model: SimulatedModel) -> None:
    rng = random.Random(7)
    samples = [sample_latency_ms(rng, model) for _ in range(2_000)]
    assert statistics.median(samples) == pytest.approx(model.p50_ms, rel=0.10)
    assert _quantile(samples, 0.95) == pytest.approx(model.p95_ms, rel=0.10)


@pytest.mark.parametrize("model", SEED_003_MODELS, ids=lambda m: m.provider_id)
def test_failure_rate_matches_table(model: SimulatedModel) -> None:
    rng, n = random.Random(11), 20_000
    outcomes = [draw(rng, model).outcome for _ in range(n)]
    failures = sum(o is not Outcome.OK for o in outcomes)
    expected = (1 - model.success_rate) * n  # 18 .. 120
    assert abs(failures - expected) <= 4 * expected**0.5 + 2
    assert any(o is Outcome.RATE_LIMITED for o in outcomes) or expected < 40


async def test_outage_fails_every_call(sim: SimulatedProviders) -> None:
    sim.set_outage(GPT, True)
    codes = [code for code, _ in await _outcomes(sim, GPT, 50)]
    assert codes == [503] * 50
    async with httpx.AsyncClient() as client:
        r = await _chat(client, sim.base_url(GPT))
    assert r.json()["error"]["type"] == "server_error"
    sim.set_outage(GPT, False)
    sim.set_success_rate(GPT, 1.0)
    assert [c for c, _ in await _outcomes(sim, GPT, 5)] == [200] * 5
    assert sim.stats(GPT).server_errors == 51


async def test_rate_limit_carries_retry_after(sim: SimulatedProviders) -> None:
    pid = "gemini-2.5-flash"
    sim.set_success_rate(pid, 0.0)
    sim.rate_limit_share = 1.0
    async with httpx.AsyncClient() as client:
        r = await _chat(client, sim.base_url(pid))
    assert r.status_code == 429
    assert "Retry-After" in r.headers and "retry-after-ms" in r.headers
    assert r.json()["error"]["code"] == "rate_limit_exceeded"


async def test_demo_yaml_parses(sim: SimulatedProviders) -> None:
    config = parse_config(yaml.safe_load(demo_providers_yaml(sim)), env={})
    assert [p.id for p in config.providers] == [m.provider_id for m in SEED_003_MODELS]
    assert config.default_route == "chat"
    assert [p.id for p in config.route_providers("chat")] == sim.provider_ids
    claude = config.provider_by_id["anthropic-claude-sonnet-4.5"]
    assert (claude.cost_per_mtok_input, claude.cost_per_mtok_output) == (3.0, 15.0)
    assert claude.default_model == "claude-sonnet-4.5"
    assert claude.base_url == sim.base_url(claude.id)
    async with httpx.AsyncClient() as client:
        listed = await client.get(f"{claude.base_url}/models")
    assert listed.json()["data"][0]["id"] == "claude-sonnet-4.5"
