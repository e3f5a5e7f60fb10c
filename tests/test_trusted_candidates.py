"""Candidates and exclusions the fold builds without validation (UCB1's scores, shared
exclusions) are their validated twins: the same JSON, types, fields and fields-set."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from app.contract import Candidate, Exclusion
from app.routing.driver import Driver
from bench.logs.synthetic import synthetic_log
from bench.replay_speed import PROFILES, bench_policy


def _types(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return type(value), {k: _types(v) for k, v in value.__dict__.items()}
    if isinstance(value, dict):
        return dict, {k: _types(v) for k, v in value.items()}
    return type(value)


def _assert_as_validated(built: BaseModel) -> None:
    validated = type(built).model_validate(dict(built.__dict__))
    assert built == validated
    assert built.model_dump_json() == validated.model_dump_json()
    assert _types(built) == _types(validated)
    assert list(built.__dict__) == list(validated.__dict__)
    assert built.model_fields_set == validated.model_fields_set
    assert built.__pydantic_extra__ is None and built.__pydantic_private__ is None


@pytest.mark.parametrize("strategy", ["ucb1", "thompson", "composite", "adaptive"])
def test_every_candidate_and_exclusion_is_its_validated_twin(strategy: str) -> None:
    policy = bench_policy(strategy)
    log = synthetic_log(policy, PROFILES, 300, interval_s=0.02)
    driver = Driver(lambda: policy)
    seen = {Candidate: 0, Exclusion: 0}
    for entry in log.routing:
        assert entry.event is not None
        for dispatch in driver.fold(entry.event, entry.offset).dispatches:
            for item in [*dispatch.decision.candidates, *dispatch.decision.excluded]:
                _assert_as_validated(item)
                seen[type(item)] += 1
    assert seen[Candidate] > 0
    if strategy == "ucb1":
        assert seen[Exclusion] > 0  # the capped deployment is full at times
