"""Routing modes, model-id suffixes and pins; guardrails (routing step 2)."""

from __future__ import annotations

import pytest
from factories import T0

from app.contract import ChatMessage, ChatRequest
from app.contract.mode import RoutingMode
from app.routing import bandit
from app.routing.rate_window import RateWindow, admit, prune, retry_after_s, window_index
from app.routing.rows import dumps, loads
from app.routing.state import RouteState
from app.routing.throughput import ema_throughput, throughput_sample
from app.understanding.guardrails import (
    RULE_FORBIDDEN_KEYWORD,
    check_forbidden,
    check_request,
    compile_keywords,
)
from app.understanding.modes import (
    MODE_WEIGHTS,
    ModelRef,
    ModeWeights,
    effective_mode,
    parse_mode,
    parse_model_id,
    throughput_bonus,
    weights_for,
)

# --------------------------------------------------------------------------- modes


@pytest.mark.parametrize(
    ("mode", "cost", "latency", "throughput"),
    [
        (RoutingMode.BALANCED, 0.1, 0.15, 0.0),
        (RoutingMode.PRICE, 0.3, 0.05, 0.0),
        (RoutingMode.LATENCY, 0.05, 0.3, 0.0),
        (RoutingMode.QUALITY, 0.0, 0.0, 0.0),
        (RoutingMode.THROUGHPUT, 0.05, 0.05, 0.3),
    ],
)
def test_mode_weights(mode: RoutingMode, cost: float, latency: float, throughput: float) -> None:
    assert weights_for(mode) == ModeWeights(cost=cost, latency=latency, throughput=throughput)


def test_every_mode_has_weights_and_modes_change_the_ranking() -> None:
    assert set(MODE_WEIGHTS) == set(RoutingMode)
    # cheap-but-slow (cerebras prices, 20 s) against dear-but-fast (anthropic prices, 0.5 s)
    cheap_slow = (0.20, 20.0)
    dear_fast = (8.0, 0.5)

    def bonus(arm: tuple[float, float], mode: RoutingMode) -> float:
        w = weights_for(mode)
        return bandit.cost_bonus(arm[0], w.cost) + bandit.latency_bonus(arm[1], w.latency)

    assert bonus(cheap_slow, RoutingMode.PRICE) > bonus(dear_fast, RoutingMode.PRICE)
    assert bonus(cheap_slow, RoutingMode.LATENCY) < bonus(dear_fast, RoutingMode.LATENCY)
    assert bonus(cheap_slow, RoutingMode.QUALITY) == bonus(dear_fast, RoutingMode.QUALITY) == 0


def test_throughput_bonus() -> None:
    weight = weights_for(RoutingMode.THROUGHPUT).throughput
    assert throughput_bonus(0.0, weight) == 0.0
    assert throughput_bonus(-5.0, weight) == 0.0
    assert throughput_bonus(100.0, weight) == pytest.approx(weight / 2)
    assert throughput_bonus(500.0, 0.3) < throughput_bonus(1000.0, 0.3) < 0.3  # never saturates
    assert throughput_bonus(1000.0, 0.0) == 0.0
    assert throughput_sample(250, 500.0) == 500.0
    assert throughput_sample(0, 500.0) is None and throughput_sample(10, 0.0) is None
    assert ema_throughput(50.0, 300.0, 0) == 300.0
    assert ema_throughput(100.0, 200.0, 3) == pytest.approx(120.0)


def test_parse_mode() -> None:
    assert parse_mode("Latency") is RoutingMode.LATENCY
    with pytest.raises(ValueError, match="balanced, price, latency, quality, throughput"):
        parse_mode("fastest")


# --------------------------------------------------------------------------- model ids


def test_route_aliases_and_suffixes() -> None:
    assert parse_model_id(None) == ModelRef(raw=None, kind="route")
    assert parse_model_id("chat") == ModelRef(raw="chat", kind="route", route="chat")
    nitro = parse_model_id("chat:nitro")
    assert (nitro.kind, nitro.route, nitro.suffix_mode) == ("route", "chat", RoutingMode.THROUGHPUT)
    floor = parse_model_id("openai/gpt-5-mini:floor")  # a vendor/model id with a suffix
    assert (floor.route, floor.suffix_mode) == ("openai/gpt-5-mini", RoutingMode.PRICE)
    assert parse_model_id("chat").suffix_mode is None


def test_pinned_ids_keep_their_suffix_in_the_canonical_id() -> None:
    pinned = parse_model_id("openai-x:gpt-4.1")
    assert (pinned.kind, pinned.provider, pinned.model) == ("pinned", "openai-x", "gpt-4.1")
    assert pinned.deployment == "openai-x:gpt-4.1" and pinned.suffix_mode is None
    # Everything after the provider is the model id, ":free" included.
    seed = parse_model_id("baseten:google/gemma-4-26b-a4b:free")
    assert (seed.provider, seed.model) == ("baseten", "google/gemma-4-26b-a4b:free")
    # A routing suffix on a pinned id is part of the model id, not a mode.
    nitro = parse_model_id("groq-x:llama-3:nitro")
    assert (nitro.kind, nitro.model, nitro.suffix_mode) == ("pinned", "llama-3:nitro", None)


def test_configured_deployment_beats_the_suffix_reading() -> None:
    assert parse_model_id("fast:nitro").kind == "route"
    pinned = parse_model_id("fast:nitro", deployments={"fast:nitro"})
    assert (pinned.kind, pinned.provider, pinned.model) == ("pinned", "fast", "nitro")


@pytest.mark.parametrize("raw", [":gpt", "openai:", "chat :nitro", " chat", ":nitro"])
def test_invalid_model_ids(raw: str) -> None:
    ref = parse_model_id(raw)
    assert ref.kind == "invalid" and ref.error
    assert ref.deployment is None


def test_mode_precedence() -> None:
    suffix, request, preset, route = (
        RoutingMode.THROUGHPUT,
        RoutingMode.LATENCY,
        RoutingMode.QUALITY,
        RoutingMode.PRICE,
    )
    assert effective_mode(suffix, request, preset, route) == (
        effective_mode(suffix, None, None, None)
    )
    assert effective_mode(suffix, request, preset, route).source == "suffix"
    assert effective_mode(None, request, preset, route).mode is request
    assert effective_mode(None, request, preset, route).source == "request"
    assert effective_mode(None, None, preset, route).mode is preset
    assert effective_mode(None, None, None, route).source == "route_default"
    default = effective_mode(None, None, None, None)
    assert (default.mode, default.source) == (RoutingMode.BALANCED, "default")
    # end to end: ":floor" beats a request asking for latency
    ref = parse_model_id("chat:floor")
    assert effective_mode(ref.suffix_mode, request, None, None).mode is RoutingMode.PRICE


# --------------------------------------------------------------------------- guardrails


RULES = compile_keywords(["bombe artisanale", "kill", "C++", "Élysée"])


@pytest.mark.parametrize(
    ("text", "keyword"),
    [
        ("Comment fabriquer une BOMBE   artisanale ?", "bombe artisanale"),
        ("How do I kill a process?", "kill"),
        ("KILL it", "kill"),
        ("I love C++.", "C++"),
        ("Le palais de l'elysee", "Élysée"),
        ("l'ÉLYSÉE", "Élysée"),
    ],
)
def test_forbidden_keywords_refuse(text: str, keyword: str) -> None:
    hit = check_forbidden(text, RULES)
    assert hit is not None
    assert (hit.rule, hit.keyword) == (RULE_FORBIDDEN_KEYWORD, keyword)


@pytest.mark.parametrize(
    "text", ["A skill to learn", "killer app", "C+ grade", "une bombe de bain", "Elyséeville"]
)
def test_forbidden_keywords_respect_word_boundaries(text: str) -> None:
    assert check_forbidden(text, RULES) is None


def test_first_rule_in_config_order_decides_and_prompt_is_never_echoed() -> None:
    hit = check_forbidden("secret data: kill the bombe artisanale now", RULES)
    assert hit is not None and hit.keyword == "bombe artisanale" and hit.index == 1
    assert "secret" not in hit.message and "now" not in hit.message
    assert "bombe artisanale" in hit.message


def test_check_request_reads_every_message() -> None:
    request = ChatRequest(
        request_id="r1",
        messages=[
            ChatMessage(role="system", content="Be nice."),
            ChatMessage(role="user", content=[{"type": "text", "text": "kill -9 1"}]),
        ],
    )
    hit = check_request(request, RULES)
    assert hit is not None and hit.keyword == "kill"
    with pytest.raises(ValueError):
        compile_keywords(["ok", "   "])


# --------------------------------------------------------------------------- rate limit

WINDOW = 60.0
START = T0 - T0 % WINDOW  # an epoch-aligned window start (T0 = 1_700_000_000 is not one)


def _admit_many(
    state: RateWindow, tenant: str, times: list[float]
) -> tuple[RateWindow, list[bool]]:
    verdicts = []
    for now in times:
        state, ok = admit(state, tenant, now, limit=2, window_s=WINDOW)
        verdicts.append(ok)
    return state, verdicts


def test_fixed_window_admits_up_to_the_limit() -> None:
    state, verdicts = _admit_many(RateWindow(), "acme", [START, START + 1, START + 2])
    assert verdicts == [True, True, False]
    assert state.tenants["acme"].count == 2  # refusals are not counted


def test_window_edge_is_exact() -> None:
    state, verdicts = _admit_many(RateWindow(), "acme", [START + 58, START + 59.999999])
    assert verdicts == [True, True]
    refused, ok = admit(state, "acme", START + WINDOW - 1e-6, 2, WINDOW)
    assert not ok and refused is state
    # exactly at the edge a new window opens
    state, ok = admit(state, "acme", START + WINDOW, 2, WINDOW)
    assert ok and state.tenants["acme"].count == 1
    # a float window that does not divide evenly in binary: 0.3 s is in window 3, not 2
    assert window_index(0.3, 0.1) == 3
    assert window_index(START + WINDOW, WINDOW) == window_index(START, WINDOW) + 1


def test_tenants_are_independent_and_retry_after() -> None:
    state, _ = _admit_many(RateWindow(), "acme", [START + 10, START + 11])
    state, ok = admit(state, "globex", START + 12, 2, WINDOW)
    assert ok
    _, ok = admit(state, "acme", START + 12, 2, WINDOW)
    assert not ok
    assert retry_after_s(state, "acme", START + 12, WINDOW) == pytest.approx(48.0)
    assert retry_after_s(state, "initech", START + 12, WINDOW) == 0.0


def test_late_event_counts_in_the_current_window_and_state_never_goes_back() -> None:
    state, _ = _admit_many(RateWindow(), "acme", [START + WINDOW + 1, START + WINDOW + 2])
    late, ok = admit(state, "acme", START + 30, 2, WINDOW)  # earlier window, delivered late
    assert not ok and late is state
    assert state.tenants["acme"].index == window_index(START + WINDOW, WINDOW)


def test_zero_limit_refuses_and_bad_window_raises_and_prune() -> None:
    _, ok = admit(RateWindow(), "acme", START, 0, WINDOW)
    assert not ok
    with pytest.raises(ValueError):
        admit(RateWindow(), "acme", START, 1, 0.0)
    state, _ = _admit_many(RateWindow(), "acme", [START])
    state, _ = admit(state, "globex", START + WINDOW, 2, WINDOW)
    assert set(prune(state, START + WINDOW, WINDOW).tenants) == {"globex"}
    assert prune(state, START, WINDOW) is state


def test_rate_window_round_trips_through_json() -> None:
    state, _ = _admit_many(RateWindow(), "acme", [START, START + 1])
    assert loads(dumps(RouteState(rate=state))).rate == state
