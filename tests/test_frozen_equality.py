"""Events compare as pydantic compares them (app/contract/base.py ``Frozen.__eq__``, a
shorter path replay takes for every decision and response it re-derives)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from pydantic import BaseModel

import app.contract
from app.contract import Decision, LogPosition, Response
from app.contract.base import Frozen
from bench.logs.synthetic import synthetic_log
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


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_every_event_model_is_one_the_short_equality_fits() -> None:
    """``Frozen.__eq__`` skips what pydantic checks for generics, private attributes,
    extra fields and cached or computed values: no event model may have them."""
    assert app.contract  # every contract module imported
    models = _subclasses(Frozen)
    assert len(models) >= 20
    for model in models:
        assert model.model_config.get("extra") == "forbid", model
        assert model.model_config.get("frozen") is True, model
        assert not model.__private_attributes__, model
        assert not model.__pydantic_computed_fields__, model
        assert not model.__pydantic_generic_metadata__["parameters"], model
        cached = [
            n
            for n, v in vars(model).items()
            if hasattr(v, "__set_name__") and "cached" in type(v).__name__
        ]
        assert not cached, (model, cached)
