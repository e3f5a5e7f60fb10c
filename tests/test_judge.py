"""The built-in judge, pure parts: config, sampling, the judge request, the score."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from factories import SECRET, params

from app.audit.export import read_policy, write_policy
from app.config.schema import ConfigError, JudgeConfig, RoutingConfig, parse_config
from app.contract import ChatMessage, ChatRequest, ErrorBody, Response
from app.embedded.simulated.judging import judge_reply
from app.grades.judge import (
    JUDGE_MARKER,
    MAX_JUDGE_TEXT_CHARS,
    judge_deployments,
    judge_feedback,
    judge_messages,
    parse_score,
    plan_judgement,
    sampled,
)
from app.routing.policy import Policy

JUDGE = "judge-co:grader"
RUBRIC = "Correct, complete and concise."


def config_data(judge: dict[str, Any] | None = None) -> dict[str, Any]:
    providers = [
        {
            "id": "cheap",
            "base_url": "https://c.test/v1",
            "api_key": SECRET,
            "models": [{"name": "m"}],
        },
        {"id": "judge-co", "base_url": "https://j.test/v1", "models": [{"name": "grader"}]},
        {"id": "offroute", "base_url": "https://o.test/v1", "models": [{"name": "x"}]},
    ]
    route: dict[str, Any] = {"providers": ["cheap", "judge-co"]}
    if judge is not None:
        route["judge"] = judge
    return {"providers": providers, "routes": {"chat": route}}


def judged(**fields: Any) -> RoutingConfig:
    return parse_config(
        config_data({"deployment": JUDGE, "sample_rate": 0.5, "rubric": RUBRIC, **fields})
    )


def error_of(judge: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(config_data(judge))
    return str(info.value)


# --------------------------------------------------------------------------- config


def test_a_judge_is_read_from_the_route() -> None:
    judge = judged().routes["chat"].judge
    assert judge == JudgeConfig(deployment=JUDGE, sample_rate=0.5, rubric=RUBRIC, allow_self=False)
    assert judged(allow_self=True).routes["chat"].judge.allow_self  # type: ignore[union-attr]
    assert judge_deployments(judged()) == {JUDGE}


@pytest.mark.parametrize(
    ("field", "judge"),
    [
        (
            "routes.chat.judge.deployment",
            {"deployment": "judge-co:nope", "sample_rate": 1, "rubric": "r"},
        ),
        (
            "routes.chat.judge.deployment",
            {"deployment": "nobody:m", "sample_rate": 1, "rubric": "r"},
        ),
        (
            "routes.chat.judge.deployment",
            {"deployment": "offroute:x", "sample_rate": 1, "rubric": "r"},
        ),
        ("routes.chat.judge.sample_rate", {"deployment": JUDGE, "sample_rate": 1.5, "rubric": "r"}),
        (
            "routes.chat.judge.sample_rate",
            {"deployment": JUDGE, "sample_rate": -0.1, "rubric": "r"},
        ),
        ("routes.chat.judge.sample_rate", {"deployment": JUDGE, "rubric": "r"}),
        ("routes.chat.judge.rubric", {"deployment": JUDGE, "sample_rate": 1, "rubric": ""}),
        (
            "routes.chat.judge.model",
            {"deployment": JUDGE, "sample_rate": 1, "rubric": "r", "model": 1},
        ),
    ],
)
def test_a_bad_judge_is_one_error_naming_the_field(field: str, judge: dict[str, Any]) -> None:
    message = error_of(judge)
    assert field in message, message
    assert SECRET not in message


def test_the_judge_is_in_the_config_hash_and_the_exported_policy(tmp_path: Path) -> None:
    plain = parse_config(config_data())
    hashes = {plain.config_hash, judged().config_hash, judged(rubric="Other.").config_hash}
    assert len(hashes) == 3 and judged().config_hash == judged().config_hash
    write_policy(Policy(judged(), params()), tmp_path)
    exported = json.loads((tmp_path / "policy.json").read_text())
    assert exported["config"]["routes"]["chat"]["judge"]["deployment"] == JUDGE
    assert SECRET not in (tmp_path / "policy.json").read_text()
    policy = read_policy(tmp_path)
    assert policy is not None and policy.config_hash == Policy(judged(), params()).config_hash


# --------------------------------------------------------------------------- sampling


def request(request_id: str = "r-1", **fields: Any) -> ChatRequest:
    fields.setdefault("messages", [ChatMessage(role="user", content="What is 2 + 2?")])
    return ChatRequest(request_id=request_id, **fields)


def completion(text: Any = "4.") -> dict[str, Any]:
    message = {"role": "assistant", "content": text, "reasoning_content": "HIDDEN-REASONING"}
    return {
        "id": "chatcmpl-SECRETID",
        "choices": [{"message": message}],
        "usage": {"total_tokens": 9},
    }


def judge(rate: float = 1.0, allow_self: bool = False) -> JudgeConfig:
    return JudgeConfig(deployment=JUDGE, sample_rate=rate, rubric=RUBRIC, allow_self=allow_self)


def test_sampling_is_deterministic_per_request_id() -> None:
    ids = [f"req-{i}" for i in range(2000)]
    first = [i for i in ids if sampled(i, 0.3)]
    assert first == [i for i in ids if sampled(i, 0.3)]
    assert 500 <= len(first) <= 700
    assert set(first) <= {i for i in ids if sampled(i, 0.6)}  # a larger rate keeps them
    assert not any(sampled(i, 0.0) for i in ids) and all(sampled(i, 1.0) for i in ids)
    plans = [plan_judgement(judge(0.3), request(i), "cheap:m", completion()) for i in ids]
    assert [i for i, p in zip(ids, plans, strict=True) if p.request] == first
    assert {p.result for p in plans} == {"requested", "not_sampled"}


def test_the_judge_never_grades_itself_unless_allowed() -> None:
    assert plan_judgement(judge(), request(), JUDGE, completion()).result == "self"
    assert plan_judgement(judge(allow_self=True), request(), JUDGE, completion()).request


def test_judge_requests_are_never_judged() -> None:
    by_id = request("judge-r-1")
    by_purpose = request("anything", metadata={"purpose": "judge"})
    for req in (by_id, by_purpose):
        assert plan_judgement(judge(), req, "cheap:m", completion()).result == "judge_request"


# --------------------------------------------------------------------------- the judge request


def test_the_judge_request_carries_the_parents_data_rules_only() -> None:
    parent = request(
        "r-8",
        provider={"only": ["cheap"], "regions": ["eu"], "zdr": True, "data_collection": "deny"},
    )
    plan = plan_judgement(judge(), parent, "cheap:m", completion("It is 4."))
    assert plan.request is not None and plan.request.provider is not None
    rules = plan.request.provider.model_dump(exclude_defaults=True)
    assert rules == {"regions": ["eu"], "zdr": True, "data_collection": "deny"}
    plain = plan_judgement(judge(), request("r-9"), "cheap:m", completion("It is 4."))
    assert plain.request is not None and plain.request.provider is None


def test_the_judge_request_is_pinned_derived_and_carries_no_more_than_needed() -> None:
    parent = request(
        "r-7",
        tenant="acme",
        session_id="sess-SECRET",
        metadata={"user": "alice@example.test"},
        provider={"only": ["cheap"]},
        messages=[
            ChatMessage(role="system", content="Be brief."),
            ChatMessage(
                role="user",
                content=[
                    {"type": "text", "text": "What is 2 + 2?"},
                    {"type": "image_url", "image_url": {"url": "data:IMAGE"}},
                ],
            ),
        ],
    )
    plan = plan_judgement(judge(), parent, "cheap:m", completion("It is 4."))
    assert plan.result == "requested" and plan.request is not None
    sent = json.loads(plan.request.model_dump_json(exclude_none=True))
    assert sent["request_id"] == "judge-r-7" and sent["model"] == JUDGE
    assert sent["metadata"] == {"purpose": "judge", "parent_request_id": "r-7"}
    # The parent's tenant goes along: its preset and data rules bind the judge too.
    assert set(sent) == {"request_id", "messages", "model", "temperature", "metadata", "tenant"}
    assert sent["tenant"] == "acme"
    system, user = sent["messages"]
    assert system["role"] == "system" and system["content"].startswith(JUDGE_MARKER)
    assert RUBRIC in system["content"] and "SCORE:" in system["content"]
    assert user == {
        "role": "user",
        "content": "Question:\nsystem: Be brief.\nuser: What is 2 + 2?\n\nAnswer:\nIt is 4.",
    }
    text = json.dumps(sent)
    for leak in (
        "sess-SECRET",
        "alice",
        "IMAGE",
        "HIDDEN-REASONING",
        "SECRETID",
        "total_tokens",
    ):
        assert leak not in text


def test_answers_that_cannot_be_judged() -> None:
    assert (
        plan_judgement(judge(), request("x" * 195), "cheap:m", completion()).result == "id_too_long"
    )
    assert plan_judgement(judge(), request(), "cheap:m", completion(None)).result == "no_answer"
    assert plan_judgement(judge(), request(), "cheap:m", {"choices": []}).result == "no_answer"
    huge = completion("y" * MAX_JUDGE_TEXT_CHARS)
    assert plan_judgement(judge(), request(), "cheap:m", huge).result == "too_large"


# --------------------------------------------------------------------------- the score


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("SCORE: 0.75", 0.75),
        ("score:1", 1.0),
        ("The answer is right.\n  SCORE: 0  \n", 0.0),
        ("SCORE: 1.0", 1.0),
        ("SCORE: 1.5", None),
        ("SCORE: 2", None),
        ("SCORE: -0.1", None),
        ("SCORE: nan", None),
        ("SCORE: inf", None),
        ("SCORE: .5", None),
        ("SCORE: 0.5 out of 1", None),
        ("SCORE: 0.5\nSCORE: 0.6", None),
        ("I'd say 0.8", None),
        ("", None),
        (None, None),
        (0.5, None),
    ],
)
def test_parse_score_is_strict(reply: Any, score: float | None) -> None:
    assert parse_score(reply) == score


def response(
    request_id: str, *, text: str = "SCORE: 0.8", deployment: str = JUDGE, error: str | None = None
) -> Response:
    when = datetime(2024, 1, 1, tzinfo=UTC)
    if error is not None:
        body = ErrorBody(type=error, message="m", code=error, http_status=504)
        return Response(
            id="x", occurred_at=when, request_id=request_id, status="error", attempts=1, error=body
        )
    completion = {"choices": [{"message": {"role": "assistant", "content": text}}]}
    return Response(
        id="x",
        occurred_at=when,
        request_id=request_id,
        status="ok",
        attempts=1,
        deployment=deployment,
        completion=completion,
    )


def test_a_judge_answer_becomes_feedback_only_with_a_score() -> None:
    judges = {JUDGE}
    result, feedback = judge_feedback(response("judge-r-1"), judges)
    assert result == "scored" and feedback is not None
    assert (feedback.request_id, feedback.source, feedback.score, feedback.weight) == (
        "r-1",
        "judge",
        0.8,
        1.0,
    )
    again = judge_feedback(response("judge-r-1", text="SCORE: 0.8"), judges)[1]
    assert again is not None and again.feedback_id == feedback.feedback_id  # a re-read: same id
    assert judge_feedback(response("judge-r-1", text="SCORE: 7"), judges) == ("unparseable", None)
    assert judge_feedback(response("judge-r-1", text="great"), judges) == ("unparseable", None)
    assert judge_feedback(response("judge-r-1", error="provider_error"), judges) == ("failed", None)
    assert judge_feedback(response("judge-r-1", error="deadline_exceeded"), judges) == (
        "late",
        None,
    )
    assert judge_feedback(response("judge-r-1", deployment="cheap:m"), judges) == (
        "not_judge",
        None,
    )
    assert judge_feedback(response("r-1"), judges) == ("not_judge", None)


def test_the_simulated_providers_answer_a_judge_with_a_parsable_score() -> None:
    messages = [
        m.model_dump(exclude_none=True) for m in judge_messages(RUBRIC, "user: hi", "hello")
    ]
    reply = judge_reply(messages)
    assert reply is not None and parse_score(reply) is not None
    assert judge_reply(messages) == reply  # deterministic
    assert judge_reply([{"role": "user", "content": "hi"}]) is None
    assert judge_reply([{"role": "system", "content": "You are helpful."}, *messages[1:]]) is None
