"""The fold builds its decisions, dispatches and responses without validation
(app/routing/records.py ``trusted``): each must be what validating the same fields builds,
the same JSON, equal, with values of the same types and the same fields set."""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from app.audit.replay import replay
from app.contract import ChatMessage, ErrorBody, Response
from app.routing.driver import Driver
from app.routing.records import record, trusted
from bench.logs.synthetic import synthetic_log
from bench.replay_speed import PROFILES, bench_policy


def _types(value: Any) -> Any:
    """The type tree of a value: what equality alone (1 == 1.0, an enum == its str) hides."""
    if isinstance(value, BaseModel):
        return type(value), {k: _types(v) for k, v in value.__dict__.items()}
    if isinstance(value, dict):
        return dict, {k: _types(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value), [_types(v) for v in value]
    return type(value)


def _assert_as_validated(built: BaseModel) -> None:
    fields = {name: getattr(built, name) for name in built.model_fields_set}
    validated = type(built)(**fields)
    assert built == validated
    assert built.model_dump_json() == validated.model_dump_json()
    assert _types(built) == _types(validated)
    assert list(built.__dict__) == list(validated.__dict__)
    assert built.model_fields_set == validated.model_fields_set


@pytest.mark.parametrize("strategy", ["ucb1", "thompson", "composite", "adaptive"])
def test_every_record_the_fold_builds_is_its_validated_twin(strategy: str) -> None:
    policy = bench_policy(strategy)
    log = synthetic_log(policy, PROFILES, 400, interval_s=0.02)
    driver = Driver(lambda: policy)
    kinds: set[str] = set()
    for entry in log.routing:
        assert entry.event is not None
        step = driver.fold(entry.event, entry.offset)
        for dispatch in step.dispatches:
            _assert_as_validated(dispatch)
            _assert_as_validated(dispatch.decision)
            kinds.add(dispatch.decision.selection_rule)
        for response in step.responses:
            _assert_as_validated(response)
            kinds.add(response.status)
    assert {"score", "ok"} <= kinds  # decisions and answers were built (errors: below)


def test_a_trusted_record_copies_like_a_validated_one() -> None:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    error = ErrorBody(type="timeout", message="late")
    fields: dict[str, Any] = {
        "id": "r",
        "occurred_at": when,
        "request_id": "q",
        "status": "error",
        "attempts": 1,
        "error": error,
    }
    built = trusted(Response)(**fields)
    assert built == Response(**fields) and built.type == "chat.response"
    copy = built.model_copy(update={"deployment": "a:m"})
    assert copy.deployment == "a:m" and built.deployment is None
    assert "deployment" in copy.model_fields_set and "deployment" not in built.model_fields_set


def test_trusted_refuses_what_needs_validation() -> None:
    with pytest.raises(TypeError, match="extra"):
        trusted(ChatMessage)

    class Mutable(BaseModel):
        tags: list[str] = []

    with pytest.raises(TypeError, match="mutable default"):
        trusted(Mutable)


def test_a_record_is_a_plain_slotted_dataclass_at_run_time() -> None:
    @record
    class Point:
        x: int = 0

    point = Point(1)
    assert point == Point(1) and not hasattr(point, "__dict__")


def test_replay_leaves_nothing_frozen_and_the_collector_on() -> None:
    policy = bench_policy("ucb1")
    log = synthetic_log(policy, PROFILES, 50, interval_s=0.02)
    assert replay(log, policy).ok
    assert gc.isenabled() and gc.get_freeze_count() == 0
