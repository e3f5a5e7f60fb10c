"""A record written inline in its parent's object (app/routing/codec.py ``Format.inline``,
its keys placed by ``Format.after``): the row is the one a parent holding the record's
fields itself writes, both ways."""

from __future__ import annotations

from dataclasses import field

import pytest

from app.routing.codec import Codec, Format
from app.routing.records import record


@record
class Flat:
    a: int = 0
    b: dict[str, float] = field(default_factory=dict)
    c: list[str] = field(default_factory=list)
    d: int = -1


@record
class Inner:
    items: dict[str, float] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)


@record
class Nested:
    a: int = 0
    inner: Inner = field(default_factory=Inner)
    d: int = -1


FLAT = Format(sparse={Flat: ("c", "d")})
NESTED = Format(
    sparse={Inner: ("names",), Nested: ("d",)},
    inline={(Nested, "inner"): {"items": "b", "names": "c"}},
)


@pytest.mark.parametrize(
    "flat",
    [Flat(), Flat(1, {"x": 0.5}, ["y"], 3), Flat(c=["z"]), Flat(b={"k": 1.0}, d=0)],
)
def test_inline_fields_are_the_keys_a_flat_record_writes(flat: Flat) -> None:
    nested = Nested(flat.a, Inner(flat.b, flat.c), flat.d)
    flat_row = Codec(FLAT).encoder(Flat)(flat)
    nested_codec = Codec(NESTED)
    row = nested_codec.encoder(Nested)(nested)
    assert list(row.items()) == list(flat_row.items())
    assert nested_codec.decoder(Nested)(flat_row) == nested
    assert nested_codec.decoder(Nested)({}) == Nested()


@record
class Apart:
    inner: Inner = field(default_factory=Inner)
    a: int = 0
    d: int = -1


APART = Format(
    sparse={Inner: ("names",), Apart: ("d",)},
    inline={(Apart, "inner"): {"items": "b", "names": "c"}},
    after={Apart: {"b": "a", "c": "b"}},
)


@pytest.mark.parametrize("flat", [Flat(), Flat(1, {"x": 0.5}, ["y"], 3), Flat(c=["z"], d=5)])
def test_inline_fields_may_be_apart_from_each_other(flat: Flat) -> None:
    apart = Apart(Inner(flat.b, flat.c), flat.a, flat.d)
    flat_row = Codec(FLAT).encoder(Flat)(flat)
    codec = Codec(APART)
    assert list(codec.encoder(Apart)(apart).items()) == list(flat_row.items())
    assert codec.decoder(Apart)(flat_row) == apart


def test_an_inline_record_is_written_in_place_without_sparse_fields() -> None:
    form = Format(inline={(Nested, "inner"): {}})
    row = Codec(form).encoder(Nested)(Nested(2, Inner({"x": 1.0}, ["n"]), 4))
    assert row == {"a": 2, "items": {"x": 1.0}, "names": ["n"], "d": 4}


def test_an_inline_record_that_cannot_be_read_back_is_refused() -> None:
    clash = Format(inline={(Nested, "inner"): {"items": "a"}})
    with pytest.raises(TypeError, match="same key"):
        Codec(clash).encoder(Nested)
    arrays = Format(arrays={Inner: None}, inline={(Nested, "inner"): {}})
    with pytest.raises(TypeError, match="inline"):
        Codec(arrays).decoder(Nested)
    unknown = Format(after={Nested: {"d": "e"}})
    with pytest.raises(TypeError, match="cannot follow"):
        Codec(unknown).encoder(Nested)
