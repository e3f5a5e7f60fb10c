"""Events compare as pydantic compares them (app/contract/base.py ``Frozen.__eq__``, a
shorter path replay takes for every decision and response it re-derives)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from pydantic import BaseModel

from app.audit.synthetic import synthetic_log
from app.events import Decision, LogPosition, Response
from bench.replay_speed import PROFILES, bench_policy


@pytest.fixture(scope="module")
def records() -> list[BaseModel]:
    log = synthetic_log(bench_policy("ucb1"), PROFILES, 60, interval_s=0.02)
    found: list[BaseModel] = [entry.event for entry in log.decisions if entry.event]
    found += [entry.event for entry in log.responses if entry.event]
    assert any(isinstance(r, Decision) for r in found) and any(
        isinstance(r, Response) for r in found
    )
    return found


def _same_both_ways(a: object, b: object) -> None:
    expected = BaseModel.__eq__(a, b)  # type: ignore[arg-type]
    assert (a == b) is expected
    assert (a != b) is (not expected)


def test_a_parsed_copy_is_equal(records: list[BaseModel]) -> None:
    for record in records:
        copy = type(record).model_validate_json(record.model_dump_json())
        assert copy is not record
        _same_both_ways(record, copy)
        assert record == copy


def test_one_field_changed_anywhere_is_not_equal(records: list[BaseModel]) -> None:
    for record in records:
        if isinstance(record, Decision):
            changed = record.model_copy(update={"attempt": record.attempt + 1})
            nested = record.candidates[0].model_copy(update={"score": 0.123456789})
            deep = record.model_copy(update={"candidates": [nested, *record.candidates[1:]]})
            for other in (changed, deep):
                _same_both_ways(record, other)
                assert record != other


def test_different_records_and_types(records: list[BaseModel]) -> None:
    for a, b in pairwise(records):
        _same_both_ways(a, b)
    position = LogPosition(topic="t", partition=0, offset=1)
    assert position != records[0]
    assert position != {"topic": "t", "partition": 0, "offset": 1}
    assert (position == 1) is False


def test_equal_records_hash_alike() -> None:
    a = LogPosition(topic="t", partition=0, offset=1)
    b = LogPosition(topic="t", partition=0, offset=1)
    assert hash(a) == hash(b) and len({a, b}) == 1
