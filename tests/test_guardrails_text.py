"""Output guardrails (app/guardrails/): the detectors and their checks, whole-text
screening, a stream screened as it comes to the same text however it is cut, the
executor's result as the rules leave it, and the delta publisher that never sends a
blocked answer's text."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
from factories import accepted, fold, policy, provider
from pydantic import ValidationError

from app.config.schema import GuardrailRule, Guardrails, parse_config
from app.contract import OUTPUT_BLOCKED, StatusClass, StreamDelta, refusal_code
from app.execution.deltas import DeltaPublisher
from app.execution.guarded import guard_answer
from app.execution.outcome import CallResult
from app.guardrails import (
    HOLD,
    StreamScreen,
    check_pattern,
    compile_rules,
    iban_valid,
    luhn_valid,
    redact_messages,
    rules_for,
    screen,
    screen_messages,
)

CARD = "4111 1111 1111 1111"
EMAIL = "jane.doe@example.org"
IBAN = "DE89 3704 0044 0532 0130 00"
PHONE = "+33 6 12 34 56 78"
KEY = "sk-proj-" + "a1B2c3D4" * 4


def rule(name: str, action: str, **fields: Any) -> GuardrailRule:
    return GuardrailRule.model_validate({"name": name, "action": action, **fields})


PII = rule("pii", "redact", detect=["email", "phone", "card_number", "iban", "api_key"])
SECRET = rule("secret", "block", keywords=["project nightingale"])
WATCH = rule("watch", "flag", patterns=[r"\bcodename [A-Z][a-z]{1,20}\b"])


def test_the_checks_of_cards_and_ibans() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid(IBAN) and iban_valid("GB82 WEST 1234 5698 7654 32")
    assert not iban_valid("DE89 3704 0044 0532 0130 01")


@pytest.mark.parametrize(
    ("found", "kind"),
    [(CARD, "card_number"), (EMAIL, "email"), (IBAN, "iban"), (PHONE, "phone"), (KEY, "api_key")],
)
def test_each_detector_redacts_what_it_finds_and_nothing_else(found: str, kind: str) -> None:
    rules = compile_rules([PII])
    screened = screen(f"Here: {found}. Done on 2024-01-15, order 12345.", rules)
    assert screened.text == f"Here: [REDACTED:{kind}]. Done on 2024-01-15, order 12345."
    assert screened.fired == ("pii:redact",) and screened.blocked is None


def test_shapes_that_fail_their_checks_are_left_alone() -> None:
    rules = compile_rules([PII])
    text = "Card 4111 1111 1111 1112, IBAN DE89 3704 0044 0532 0130 01, ref 123456789."
    assert screen(text, rules).text == text


def test_keywords_block_in_any_case_as_whole_words_and_flags_only_record() -> None:
    rules = compile_rules([SECRET, WATCH])
    blocked = screen("About PROJECT  Nightingale, codename Falcon.", rules)
    assert blocked.blocked == "secret" and blocked.text == ""
    assert blocked.fired == ("secret:block", "watch:flag")
    assert screen("the projects nightingales", rules).blocked is None
    flagged = screen("Its codename Falcon.", rules)
    assert (flagged.text, flagged.fired) == ("Its codename Falcon.", ("watch:flag",))


def test_patterns_must_compile_and_be_bounded() -> None:
    assert check_pattern(r"secret-\d{1,8}").pattern == r"secret-\d{1,8}"
    for bad in (r"secret.*", r"(unclosed", r"a{1,300}"):
        with pytest.raises(ValueError):
            check_pattern(bad)
    with pytest.raises(ValidationError, match="bound its repetitions"):
        rule("r", "flag", patterns=[r"x+"])
    with pytest.raises(ValidationError, match="detect, keywords or patterns"):
        rule("r", "flag")
    with pytest.raises(ValidationError, match="each name once"):
        Guardrails(output=[PII, PII])


def _answer(seed: int) -> str:
    rng = random.Random(seed)
    words = [
        "lorem",
        "ipsum",
        "dolor",
        "sit",
        "amet",
        "consectetur",
        "adipiscing",
        "elit",
        "sed",
        "do",
    ]
    pieces = [rng.choice(words) for _ in range(rng.randint(50, 400))]
    for found in rng.sample([CARD, EMAIL, IBAN, PHONE, KEY, "codename Falcon"], 3):
        pieces.insert(rng.randrange(len(pieces) + 1), found)
    return " ".join(pieces)


def _streamed(text: str, screen_: StreamScreen, rng: random.Random) -> str:
    out, at = [], 0
    while at < len(text):
        size = rng.choice([1, 2, 3, 7, 40, 300])
        out.append(screen_.feed(text[at : at + size]))
        at += size
    out.append(screen_.finish())
    return "".join(out)


@pytest.mark.parametrize("seed", range(40))
def test_a_stream_screened_as_it_comes_equals_the_whole_text_screened(seed: int) -> None:
    rules = compile_rules([PII, WATCH])
    text = _answer(seed)
    streamed = StreamScreen(rules)
    assert _streamed(text, streamed, random.Random(seed)) == screen(text, rules).text
    assert streamed.fired == screen(text, rules).fired


@pytest.mark.parametrize("seed", range(20))
def test_a_blocked_stream_never_releases_the_blocked_text(seed: int) -> None:
    rules = compile_rules([PII, SECRET])
    text = _answer(seed)
    cut = random.Random(seed).randrange(len(text))
    text = text[:cut] + " project nightingale " + text[cut:]
    streamed = StreamScreen(rules)
    released = _streamed(text, streamed, random.Random(seed + 1))
    assert streamed.blocked == "secret"
    assert "nightingale" not in released
    assert screen(text, compile_rules([PII])).text.startswith(released)


def test_text_is_released_once_it_is_settled() -> None:
    streamed = StreamScreen(compile_rules([PII]))
    assert streamed.feed("x" * (HOLD - 1)) == ""
    assert streamed.feed("yy") == "x"
    assert streamed.finish() == "x" * (HOLD - 2) + "yy"


def _result(content: str) -> CallResult:
    completion = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
    return CallResult(StatusClass.SUCCESS, 200, 12.0, completion=completion)


def test_the_executor_result_redacted_flagged_or_blocked() -> None:
    rules = compile_rules([PII, SECRET])
    redacted = guard_answer(_result(f"pay with {CARD}"), rules)
    assert redacted.completion is not None
    assert redacted.completion["choices"][0]["message"]["content"] == (
        "pay with [REDACTED:card_number]"
    )
    assert redacted.output_rules == ("pii:redact",)
    blocked = guard_answer(_result("about project nightingale"), rules)
    assert blocked.status_class is StatusClass.CLIENT_ERROR and blocked.completion is None
    assert refusal_code(blocked.error) == OUTPUT_BLOCKED and "'secret'" in (blocked.error or "")
    assert "nightingale" not in (blocked.error or "")
    clean = _result("nothing to see")
    assert guard_answer(clean, rules) is clean


def test_rules_apply_to_their_routes_and_tenants() -> None:
    config = parse_config(
        {
            "providers": [{"id": "p", "base_url": "https://p.test/v1", "models": [{"name": "m"}]}],
            "routes": {"chat": {"providers": ["p"]}, "code": {"providers": ["p"]}},
            "guardrails": {
                "output": [
                    {"name": "a", "action": "flag", "keywords": ["x"], "routes": ["code"]},
                    {"name": "b", "action": "flag", "keywords": ["y"], "tenants": ["acme"]},
                ]
            },
        },
        env={},
    )
    rules = config.guardrails.output
    names = lambda route, tenant: [r.name for r in rules_for(rules, route, tenant).rules]  # noqa: E731
    assert names("chat", None) == []
    assert names("code", None) == ["a"]
    assert names("chat", "acme") == ["b"]
    assert names("code", "acme") == ["a", "b"]


def _dispatch(request_id: str) -> Any:
    (dispatch,) = fold([accepted(request_id)], policy(provider("a"))).dispatches
    return dispatch


async def test_the_delta_publisher_sends_screened_text_and_nothing_of_a_blocked_answer() -> None:
    sent: list[StreamDelta] = []

    async def send(delta: StreamDelta) -> Any:
        sent.append(delta)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    rules = compile_rules([PII, SECRET])
    text = "lorem " * 80 + f"card {CARD} " + "ipsum " * 80
    publisher = DeltaPublisher(_dispatch("d1"), send, 0.001, StreamScreen(rules))
    for token in text.split(" "):
        publisher.piece(token + " ", None, None)
        await asyncio.sleep(0)
    await publisher.finish("ok")
    assert "".join(d.content or "" for d in sent) == screen(text + " ", rules).text

    sent.clear()
    blocked = "lorem " * 80 + "project nightingale " + "ipsum " * 80
    publisher = DeltaPublisher(_dispatch("d2"), send, 0.001, StreamScreen(rules))
    for token in blocked.split(" "):
        publisher.piece(token + " ", None, None)
        await asyncio.sleep(0)
    await publisher.finish("failed", error="output_blocked")
    received = "".join(d.content or "" for d in sent)
    assert "nightingale" not in received and received.startswith("lorem")


def test_input_rules_redact_the_messages_and_name_the_blocking_rule() -> None:
    from app.contract import ChatRequest

    request = ChatRequest.model_validate(
        {
            "request_id": "i1",
            "messages": [
                {"role": "system", "content": "You answer briefly."},
                {"role": "user", "content": [{"type": "text", "text": f"my card is {CARD}"}]},
                {"role": "user", "content": f"mail {EMAIL}"},
            ],
        }
    )
    rules = compile_rules([PII, SECRET])
    redacted = redact_messages(request, rules)
    assert redacted.messages[0] is request.messages[0]
    assert redacted.messages[1].content == [
        {"type": "text", "text": "my card is [REDACTED:card_number]"}
    ]
    assert redacted.messages[2].content == "mail [REDACTED:email]"
    assert screen_messages(request, rules).fired == ("pii:redact",)
    assert redact_messages(request, compile_rules([SECRET])) is request
    secret = request.model_copy(update={"messages": [*request.messages, *redacted.messages[:0]]})
    assert screen_messages(secret, rules).blocked is None
    split = ChatRequest.model_validate(
        {
            "request_id": "i2",
            "messages": [
                {"role": "user", "content": "project"},
                {"role": "user", "content": "nightingale"},
            ],
        }
    )
    assert screen_messages(split, rules).blocked is None  # a find never spans messages
    joined = split.model_copy(
        update={
            "messages": [split.messages[0].model_copy(update={"content": "Project Nightingale?"})]
        }
    )
    blocked = screen_messages(joined, rules)
    assert blocked.blocked == "secret" and blocked.fired == ("secret:block",)


def test_ingest_records_the_input_rules_and_the_fold_refuses_a_blocked_request() -> None:
    from app.contract import LogPosition
    from app.ingest import accept
    from app.routing.fold import at

    config = parse_config(
        {
            "providers": [{"id": "p", "base_url": "https://p.test/v1", "models": [{"name": "m"}]}],
            "routes": {"chat": {"providers": ["p"]}},
            "guardrails": {
                "input": [
                    {"name": "pii", "action": "redact", "detect": ["card_number"]},
                    {"name": "secret", "action": "block", "keywords": ["project nightingale"]},
                ]
            },
        },
        env={},
    )
    where = LogPosition(topic="llm.requests", partition=0, offset=0)

    def accepted_of(request_id: str, text: str) -> Any:
        message = {"role": "user", "content": text}
        raw = json.dumps({"request_id": request_id, "messages": [message]}).encode()
        return accept(raw, where, at(0.0), config, max_request_bytes=10**6, deadletter_max_bytes=64)

    card = accepted_of("a1", f"pay {CARD}")
    assert (card.input_rules, card.input_blocked) == (["pii:redact"], None)
    assert card.request.messages[0].content == f"pay {CARD}"  # the log keeps the request
    refused = accepted_of("a2", "about project nightingale")
    assert (refused.input_rules, refused.input_blocked) == (["secret:block"], "secret")
    from app.routing.params import RoutingParams
    from app.routing.policy import Policy

    run = fold([refused], Policy(config, RoutingParams()))
    assert run.dispatches == []
    (response,) = run.responses
    assert response.error is not None and response.error.code == "input_blocked"
    assert "'secret'" in response.error.message and "nightingale" not in response.error.message
