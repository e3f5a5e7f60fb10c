"""What the embedded stack shows without a file of the user's: the simulated providers'
prompt caches (cached tokens for a prefix answered recently), the providers file's auto
block, quality priors, cached-input prices, budget and dynamic route, and the demo's
traffic that exercises each."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml

from app.config.schema import parse_config
from app.demo_showcase import AUTO_EVERY, TURNS, Features, render_features, showcase_request
from app.embedded.simulated import SimulatedProviders, demo_providers_yaml
from app.embedded.simulated.prompt_cache import MIN_CACHED_TOKENS, TTL_S, PromptCache
from app.embedded.simulated.providers_file import SHOWCASE_GRAPH, SHOWCASE_TENANT

LONG = "x" * (4 * MIN_CACHED_TOKENS + 100)  # a system prompt of ~1,050 tokens


def talk(*users: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": LONG}]
    for n, user in enumerate(users):
        if n:
            messages.append({"role": "assistant", "content": f"answer {n}"})
        messages.append({"role": "user", "content": user})
    return messages


def test_a_prefix_is_read_once_seen_and_only_from_1024_tokens() -> None:
    now = [0.0]
    cache = PromptCache(clock=lambda: now[0])
    assert cache.serve(talk("hello")) == 0  # never seen
    assert cache.serve(talk("another question")) == len(LONG) // 4  # the system prompt
    history = talk("another question", "and then?")
    # the previous call's prompt: the system prompt and the first question (not its answer)
    assert cache.serve(history) == sum(len(m["content"]) for m in history[:2]) // 4
    assert cache.serve(history) == sum(len(m["content"]) for m in history) // 4  # all of it
    assert cache.serve([{"role": "user", "content": "short"}] * 2) == 0
    assert cache.serve([{"role": "user", "content": "short"}] * 2) == 0  # under 1,024 tokens
    now[0] += TTL_S + 1
    assert cache.serve(talk("hello")) == 0  # expired
    assert cache.serve(talk("hello")) > 0


@pytest.fixture
async def sim() -> AsyncIterator[SimulatedProviders]:
    async with SimulatedProviders(seed=1, time_scale=0.001) as providers:
        yield providers


async def test_a_provider_reports_cached_tokens_for_a_prompt_it_saw(
    sim: SimulatedProviders,
) -> None:
    pid = "deepseek-v3.2"
    sim.set_success_rate(pid, 1.0)

    async def usage(messages: list[dict[str, str]], stream: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "m", "messages": messages}
        async with httpx.AsyncClient() as client:
            reply = await client.post(f"{sim.base_url(pid)}/chat/completions", json=body)
        return dict(reply.json()["usage"])

    first = await usage(talk("hi"))
    assert "prompt_tokens_details" not in first
    second = await usage(talk("hi"))
    assert second["prompt_tokens_details"]["cached_tokens"] == second["prompt_tokens"]
    assert sim.stats(pid).cache_reads == 1
    sim.set_success_rate("gemini-2.5-flash", 1.0)
    async with httpx.AsyncClient() as client:  # another provider has its own cache
        body = {"model": "m", "messages": talk("hi")}
        other = await client.post(f"{sim.base_url('gemini-2.5-flash')}/chat/completions", json=body)
    assert "prompt_tokens_details" not in other.json()["usage"]


async def test_the_providers_file_shows_every_feature(sim: SimulatedProviders) -> None:
    config = parse_config(yaml.safe_load(demo_providers_yaml(sim)), env={})
    auto = config.routes["chat"].auto
    assert auto is not None and auto.spend_profile == "standard"
    for model in sim.models:
        entry = config.provider_by_id[model.provider_id]
        assert entry.cost_per_mtok_cached_input == model.cost_per_mtok_cached_input
        assert entry.cached_input_price < entry.input_price
        assert entry.quality_prior_of(model.model) == model.quality_prior
    assert [b.key for b in config.budgets] == [f"tenant:{SHOWCASE_TENANT}"]
    assert list(config.dynamic_routes.root) == [SHOWCASE_GRAPH]


def test_the_demo_sends_auto_questions_and_conversations_of_both_kinds() -> None:
    asked = [showcase_request(i) for i in range(600)]
    assert Counter(r["model"] for r in asked) == {"auto": 60, "chat": 540}
    assert all(r["model"] == "auto" for r in asked[AUTO_EVERY - 1 :: AUTO_EVERY])
    turns = Counter(r["session_id"] for r in asked if r["model"] == "chat")
    assert set(turns.values()) <= set(range(1, TURNS + 1))
    by_session: dict[str, list[dict[str, Any]]] = {}
    for request in asked:
        if "session_id" in request:
            by_session.setdefault(request["session_id"], []).append(request)
    for requests in by_session.values():  # each turn carries the conversation so far
        for before, after in itertools.pairwise(requests):
            assert after["messages"][: len(before["messages"])] == before["messages"]
    tenants = {r.get("tenant") for r in by_session["demo-conversation-0"]}
    assert tenants == {SHOWCASE_TENANT}
    assert {r.get("tenant") for r in by_session["demo-conversation-1"]} == {None}


def test_the_features_are_counted_from_decisions_and_outcomes() -> None:
    features = Features()
    auto = {"attempt": 1, "selection_rule": "auto", "model": "m", "auto": {"model": "m"}}
    features.take_decision(auto)
    features.take_decision(
        {"attempt": 1, "selection_rule": "affinity", "model": "m",
         "dynamic": {"graph": "ab-test", "path": {"end": "cheap"}}}
    )  # fmt: skip
    features.take_outcome({"tokens_in": 1000, "tokens_cached": 750})
    assert features.auto_picks == {"m": 1} and features.dynamic_hits == {"ab-test/cheap": 1}
    assert (features.affinity_share, features.cache_hit_rate) == (0.5, 0.75)
    budget = {"tenant:demo-team": {"spent_day_usd": 0.25, "limit_day_usd": 1.0, "held_usd": 0.0}}
    lines = render_features({"m": 1}, 0.75, 0.5, budget, {"ab-test/cheap": 1})
    assert any("75.0%" in line for line in lines) and any("$0.2500 of $1.00" in x for x in lines)
