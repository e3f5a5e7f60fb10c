"""A route's row (app/routing/rows.py) on states drawn from the state classes' own fields.

``sample_state(seed)`` draws a route state from the type hints of
app/routing/state.py's classes (every field at its default about a third of the time,
so rows with and without the optional keys both occur). Two properties:

* a row reads back as the state it was written from, to the type (a float stays a
  float, a tuple a tuple), for every state class;
* ``tests/fixtures/route_rows.jsonl`` holds the rows written for the states of seeds
  0..N-1: today's rows are the same bytes, and read back as those states;
* ``tests/fixtures/route_rows_with_ledger.jsonl`` holds the rows the codec wrote for
  the states of the same seeds while a route state had a ``ledger`` field (a budget's
  key held a route state then) and before the codec was derived from the classes, the
  hand-written codec's bytes: each reads back as a route state written back as the same
  bytes but the ledger, and as a budget state whose ledger is written back as the same
  bytes.

The fixture pins the row format: when a state class changes on purpose, rewrite it with
``python tests/test_rows_samples.py --write`` and look at the diff.
"""

from __future__ import annotations

import random
import sys
import types
from dataclasses import MISSING, Field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import orjson

from app.routing.budget_state import BudgetState
from app.routing.rows import (
    ROW_FORMAT,
    budget_from_row,
    budget_to_row,
    dumps,
    from_row,
    loads,
    to_row,
)
from app.routing.state import RouteState

FIXTURE = Path(__file__).parent / "fixtures" / "route_rows.jsonl"
WITH_LEDGER = Path(__file__).parent / "fixtures" / "route_rows_with_ledger.jsonl"
#: States in the fixture (seeds 0..FIXTURE_STATES-1).
FIXTURE_STATES = 40

FLOATS = (0.0, -0.0, 1.0, 0.5, 0.1 + 0.2, 1e-300, 2.5e20, 5.0, 12.75, 1700000123.456789)
#: -1 is the one negative integer a state holds (positions and offsets before any).
INTS = (-1, 0, 1, 3, 4242, 28333335, 2**40)
TEXTS = ("", "a:m1", "req-1#2", "tenant:acme", "é", "日本語", 'q"\\', "budget:route:chat")


def sample(tp: Any, rng: random.Random) -> Any:
    """A value of type ``tp`` (a state class, or what its fields hold)."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is bool:
        return rng.random() < 0.5
    if tp is int:
        return rng.choice(INTS)
    if tp is float:
        return rng.choice(FLOATS) if rng.random() < 0.7 else rng.uniform(-1e6, 1e6)
    if tp is str:
        return rng.choice(TEXTS)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return rng.choice(list(tp))
    if isinstance(tp, type) and is_dataclass(tp):
        return sample_record(tp, rng)
    if origin is dict:
        return {sample(args[0], rng): sample(args[1], rng) for _ in range(rng.randint(0, 2))}
    if origin is list:
        return [sample(args[0], rng) for _ in range(rng.randint(0, 2))]
    if origin is tuple and args[-1] is Ellipsis:
        return tuple(sample(args[0], rng) for _ in range(rng.randint(0, 2)))
    if origin is tuple:
        return tuple(sample(arg, rng) for arg in args)
    if origin in (Union, types.UnionType):
        choices = [arg for arg in args if arg is not type(None)]
        return None if rng.random() < 0.3 else sample(rng.choice(choices), rng)
    raise TypeError(f"no sample for {tp!r}")


def sample_record(cls: type[Any], rng: random.Random) -> Any:
    """A record of ``cls``, its fields drawn in the order of its row's keys: a record
    written inline in its parent's row (``ROW_FORMAT.inline``) is drawn field by field
    where its keys are (``ROW_FORMAT.after``), so a row key gets the same value whether
    its field is the parent's or a sub-state's."""
    values: dict[tuple[str, ...], Any] = {}
    for path, owner, f in row_fields(cls):
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if not has_default or rng.random() >= 0.3:
            values[path] = sample(get_type_hints(owner)[f.name], rng)
    return build(cls, values, ())


def row_fields(cls: type[Any]) -> list[tuple[tuple[str, ...], type[Any], Field[Any]]]:
    """The fields ``cls``'s row holds, in the row's order: each with its path of
    attributes from a ``cls`` and its class."""
    keyed: list[tuple[str, tuple[str, ...], type[Any], Field[Any]]] = []
    for f in fields(cls):
        keys = ROW_FORMAT.inline.get((cls, f.name))
        if keys is None:
            keyed.append((f.name, (f.name,), cls, f))
            continue
        for path, owner, inner in row_fields(get_type_hints(cls)[f.name]):
            key = keys.get(path[0], path[0]) if len(path) == 1 else path[-1]
            keyed.append((key, (f.name, *path), owner, inner))
    for key, previous in ROW_FORMAT.after.get(cls, {}).items():
        moved = next(item for item in keyed if item[0] == key)
        keyed.remove(moved)
        keyed.insert(next(i for i, item in enumerate(keyed) if item[0] == previous) + 1, moved)
    return [(path, owner, f) for _, path, owner, f in keyed]


def build(cls: type[Any], values: dict[tuple[str, ...], Any], at: tuple[str, ...]) -> Any:
    """The ``cls`` at path ``at`` of ``values`` (by path; a field left out: its default)."""
    arguments = {}
    for f in fields(cls):
        path = (*at, f.name)
        if (cls, f.name) in ROW_FORMAT.inline:
            arguments[f.name] = build(get_type_hints(cls)[f.name], values, path)
        elif path in values:
            arguments[f.name] = values[path]
    return cls(**arguments)


def sample_state(seed: int) -> RouteState:
    state: RouteState = sample_record(RouteState, random.Random(seed))
    return state


def record_classes(cls: type[Any], found: set[type[Any]] | None = None) -> set[type[Any]]:
    """``cls`` and every record class its fields hold, however deep."""
    found = set() if found is None else found
    found.add(cls)
    stack = list(get_type_hints(cls).values())
    while stack:
        tp = stack.pop()
        if isinstance(tp, type) and is_dataclass(tp) and tp not in found:
            record_classes(tp, found)
        stack.extend(get_args(tp))
    return found


def records_in(value: Any, found: set[type[Any]]) -> None:
    if is_dataclass(value) and not isinstance(value, type):
        found.add(type(value))
        for f in fields(value):
            records_in(getattr(value, f.name), found)
    elif isinstance(value, dict):
        for item in value.values():
            records_in(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            records_in(item, found)


def assert_same(read: Any, written: Any, path: str = "state") -> None:
    """Equal, and of the same types all the way down (``==`` takes 1 for 1.0)."""
    assert type(read) is type(written), (path, read, written)
    if is_dataclass(written):
        for f in fields(written):
            assert_same(getattr(read, f.name), getattr(written, f.name), f"{path}.{f.name}")
    elif isinstance(written, dict):
        assert list(read) == list(written), path
        for key, item in written.items():
            assert_same(read[key], item, f"{path}[{key!r}]")
    elif isinstance(written, list | tuple):
        assert len(read) == len(written), path
        for i, (a, b) in enumerate(zip(read, written, strict=True)):
            assert_same(a, b, f"{path}[{i}]")
    else:
        assert read == written, (path, read, written)


def test_every_state_class_reads_back_as_written() -> None:
    classes = record_classes(RouteState)
    seen: set[type[Any]] = set()
    for seed in range(300):
        state = sample_state(seed)
        records_in(state, seen)
        assert_same(loads(dumps(state)), state)
        assert_same(from_row(to_row(state)), state)
        assert_same(from_row(orjson.loads(dumps(state))), state)
    assert seen == classes


def test_every_budget_state_class_reads_back_as_written() -> None:
    classes = record_classes(BudgetState)
    seen: set[type[Any]] = set()
    for seed in range(300):
        state = sample_record(BudgetState, random.Random(seed))
        records_in(state, seen)
        assert_same(budget_from_row(orjson.loads(dumps(state))), state)
        assert_same(budget_from_row(budget_to_row(state)), state)
    assert seen == classes


def test_rows_written_while_a_route_state_held_a_ledger_read_back() -> None:
    lines = WITH_LEDGER.read_bytes().splitlines()
    assert len(lines) == FIXTURE_STATES
    ledgers = 0
    for line in lines:
        old = orjson.loads(line)
        assert orjson.dumps(old) == line  # so its keys' bytes are compared below
        ledger = old.pop("ledger", None)
        assert orjson.dumps(to_row(loads(line))) == orjson.dumps(old)
        budget = budget_to_row(budget_from_row(orjson.loads(line)))
        assert (budget["clock"], budget["position"]) == (old["clock"], old["position"])
        assert budget.get("policy_version") == old.get("policy_version")
        if ledger is not None:
            ledgers += 1
            assert orjson.dumps(budget["ledger"]) == orjson.dumps(ledger)
        else:
            assert "ledger" not in budget
    assert 0 < ledgers < FIXTURE_STATES


def test_rows_are_the_bytes_the_hand_written_codec_wrote() -> None:
    lines = FIXTURE.read_bytes().splitlines()
    assert len(lines) == FIXTURE_STATES
    for seed, line in enumerate(lines):
        state = sample_state(seed)
        assert dumps(state) == line, seed
        assert_same(loads(line), state)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_bytes(b"".join(dumps(sample_state(s)) + b"\n" for s in range(FIXTURE_STATES)))
