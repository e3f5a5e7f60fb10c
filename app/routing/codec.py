"""Records (dataclasses) to and from JSON values, derived from their fields.

A record is written as an object of its fields, in field order, each by its type hint:
numbers, strings and booleans as they are, an enum as its value, lists and tuples as
arrays, dicts (string keys) as objects, a record in its own form, ``X | None`` as either.
Read back, every value is made its field's type again (JSON does not tell ``1`` from
``1.0``, nor a tuple from a list) and a missing key takes the field's default (a field
without one must be there). Strings are taken as they are: the values read are trusted
to be what this codec wrote. A :class:`Format` names where a stored format departs from
that: fields left out at their default, records written as arrays, values written by
hand, older forms brought up to date before they are read.

A class's two functions are generated once, as :mod:`dataclasses` generates
``__init__`` (and app/routing/state.py ``evolve``), since the router writes a row per
fold step: they cost what the codec written by hand for each class cost (route rows:
within 6 % to write, 10-30 % less to read).
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

T = TypeVar("T")
Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]

#: Written as they are; read back through their own constructor (but ``str``).
_PLAIN = (bool, int, float, str)
#: Defaults that are falsy exactly when they are empty or zero: ``if value:`` tells them.
_FALSY_WHEN_EMPTY = (bool, int, float, str, tuple, list, dict)


@dataclass(frozen=True)
class Format:
    """Where a stored format departs from an object of every field, in field order."""

    #: Fields left out while at their default, by class (rows that never had one read the
    #: same); each needs a default.
    sparse: Mapping[type[Any], Collection[str]] = field(default_factory=dict)
    #: Classes written as arrays of their fields' values: in the order given (``None``: in
    #: field order); ``*name``, last, spreads that field's own array into this one.
    arrays: Mapping[type[Any], Sequence[str] | None] = field(default_factory=dict)
    #: Values written and read by hand, by class or by ``(class, field name)``.
    custom: Mapping[type[Any] | tuple[type[Any], str], tuple[Encode, Decode]] = field(
        default_factory=dict
    )
    #: An older form of a class's value to today's, applied to what is read before reading it.
    upgrades: Mapping[type[Any], Callable[[Any], Any]] = field(default_factory=dict)


class Codec:
    """The encoder and decoder of each record class under one :class:`Format`."""

    def __init__(self, form: Format) -> None:
        self._form = form
        #: The generated functions and what they refer to.
        self._scope: dict[str, Any] = {}
        #: Name in ``_scope`` of each generated function (by kind and class) and constant.
        self._names: dict[tuple[str, object], str] = {}

    def encoder(self, cls: type[T]) -> Callable[[T], Any]:
        return cast("Callable[[T], Any]", self._scope[self._function("enc", cls)])

    def decoder(self, cls: type[T]) -> Callable[[Any], T]:
        return cast("Callable[[Any], T]", self._scope[self._function("dec", cls)])

    # ------------------------------------------------------------------ generation

    def _function(self, kind: str, cls: type[Any]) -> str:
        found = self._names.get((kind, cls))
        if found is not None:
            return found
        if not is_dataclass(cls):
            raise TypeError(f"{cls!r} is not a record class")
        name = self._name(f"{kind}_{cls.__name__}", (kind, cls))
        if kind == "enc":
            source = self._encoder_source(cls, name)
        else:
            source = self._decoder_source(cls, name)
        exec(source, self._scope)  # generated from the class's own fields
        return name

    def _name(self, stem: str, key: tuple[str, object]) -> str:
        name, n = stem, 1
        while name in self._scope or name in self._names.values():
            n += 1
            name = f"{stem}_{n}"
        self._names[key] = name
        return name

    def _constant(self, value: object) -> str:
        """An expression for ``value`` in generated code: a literal, or a name in scope."""
        if value is None or type(value) in (bool, int, str) or (type(value) is tuple and not value):
            return repr(value)
        if type(value) is float and math.isfinite(value):
            return repr(value)
        found = self._names.get(("const", id(value)))
        if found is None:
            found = self._name(
                f"c_{getattr(value, '__name__', type(value).__name__)}", ("const", id(value))
            )
            self._scope[found] = value
        return found

    def _by_hand(self, key: type[Any] | tuple[type[Any], str], which: int, v: str) -> str | None:
        """A call of the function written by hand for ``key`` (0: writing, 1: reading) on
        ``v``; None if there is none."""
        pair = self._form.custom.get(key)
        return None if pair is None else f"{self._constant(pair[which])}({v})"

    # ------------------------------------------------------------------ writing

    def _encoder_source(self, cls: type[Any], name: str) -> str:
        sparse = self._sparse(cls)
        if not sparse:
            return f"def {name}(o):\n    return {self._display(cls, 'o', 0)}\n"
        hints = get_type_hints(cls)
        lines: list[str] = []
        literal: list[str] = []
        for f in fields(cls):
            hint = hints[f.name]
            if f.name in sparse and f.default is None:
                hint = _optional(hint) or hint  # written only when it is not None
            key, value = repr(f.name), self._write_field(cls, f, hint, "o", 0)
            if f.name not in sparse and not lines:
                literal.append(f"{key}: {value}")
                continue
            if not lines:
                lines.append(f"    row = {{{', '.join(literal)}}}")
            if f.name in sparse:
                lines.append(f"    if {self._away(f)}:")
                lines.append(f"        row[{key}] = {value}")
            else:
                lines.append(f"    row[{key}] = {value}")
        return "\n".join([f"def {name}(o):", *lines, "    return row", ""])

    def _display(self, cls: type[Any], o: str, depth: int) -> str:
        """An object or array display writing record ``o`` (a name) of ``cls``, which
        leaves no field out."""
        hints = get_type_hints(cls)
        if cls in self._form.arrays:
            items = []
            for f, spread in self._array_fields(cls, self._form.arrays[cls]):
                value = self._write_field(cls, f, hints[f.name], o, depth)
                items.append(f"*{value}" if spread else value)
            return f"[{', '.join(items)}]"
        items = [
            f"{f.name!r}: {self._write_field(cls, f, hints[f.name], o, depth)}" for f in fields(cls)
        ]
        return f"{{{', '.join(items)}}}"

    def _write_field(self, cls: type[Any], f: Field[Any], hint: Any, o: str, depth: int) -> str:
        value = f"{o}.{f.name}"
        return self._by_hand((cls, f.name), 0, value) or self._write(hint, value, depth)

    def _write(self, tp: Any, v: str, depth: int) -> str:
        """An expression writing the value of expression ``v`` (a name or an attribute)."""
        by_hand = self._by_hand(tp, 0, v)
        if by_hand is not None:
            return by_hand
        if tp in _PLAIN:
            return v
        if isinstance(tp, type) and issubclass(tp, Enum):
            return f"{v}.value"
        if isinstance(tp, type):
            if v.isidentifier() and not self._form.sparse.get(tp):
                return self._display(tp, v, depth)  # written in place: no call
            return f"{self._function('enc', tp)}({v})"
        return self._container(tp, v, depth, self._write, reading=False)

    def _sparse(self, cls: type[Any]) -> set[str]:
        sparse = set(self._form.sparse.get(cls, ()))
        unknown = sparse - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
        return sparse

    def _away(self, f: Field[Any]) -> str:
        """A test that field ``f`` of ``o`` is away from its default."""
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            raise TypeError(f"{f.name} is left out at its default and has none")
        if default is None:
            return f"o.{f.name} is not None"
        if type(default) in _FALSY_WHEN_EMPTY and not default:
            return f"o.{f.name}"
        return f"o.{f.name} != {self._constant(default)}"

    # ------------------------------------------------------------------ reading

    def _decoder_source(self, cls: type[Any], name: str) -> str:
        hints = get_type_hints(cls)
        upgrade = self._form.upgrades.get(cls)
        lines = [f"def {name}(j):"]
        if upgrade is not None:
            lines.append(f"    j = {self._constant(upgrade)}(j)")
        values: dict[str, str] = {}
        if cls in self._form.arrays:
            order = self._array_fields(cls, self._form.arrays[cls])
            names = [("*" if spread else "") + f"a_{f.name}" for f, spread in order]
            lines.append(f"    {', '.join(names)}, = j")
            for f, _ in order:
                values[f.name] = self._read_field(cls, f, hints[f.name], f"a_{f.name}")
        else:
            for f in fields(cls):
                key = repr(f.name)
                value = self._read_field(cls, f, hints[f.name], f"j[{key}]")
                if f.default is not MISSING or f.default_factory is not MISSING:
                    value = f"{value} if {key} in j else {self._default(f)}"
                values[f.name] = value
        if any(f.kw_only for f in fields(cls)):
            arguments = ", ".join(f"{n}={v}" for n, v in values.items())
        else:
            arguments = ", ".join(values[f.name] for f in fields(cls))
        lines.append(f"    return {self._constant(cls)}({arguments})")
        return "\n".join([*lines, ""])

    def _read_field(self, cls: type[Any], f: Field[Any], hint: Any, j: str) -> str:
        return self._by_hand((cls, f.name), 1, j) or self._read(hint, j, 0)

    def _read(self, tp: Any, j: str, depth: int) -> str:
        """An expression reading the JSON value of expression ``j`` (a name or an item)."""
        by_hand = self._by_hand(tp, 1, j)
        if by_hand is not None:
            return by_hand
        if tp is str:
            return j
        if tp in _PLAIN:
            return f"{tp.__name__}({j})"
        if isinstance(tp, type) and issubclass(tp, Enum):
            return f"{self._constant(tp)}({j})"
        if isinstance(tp, type):
            return f"{self._function('dec', tp)}({j})"
        return self._container(tp, j, depth, self._read, reading=True)

    def _container(
        self, tp: Any, v: str, depth: int, convert: Callable[[Any, str, int], str], *, reading: bool
    ) -> str:
        """Writing or reading (by ``convert``, on each item) a list, a tuple, a dict or an
        ``X | None``: the value of expression ``v`` (a name, an attribute or an item)."""
        origin, args = get_origin(tp), get_args(tp)
        k, x = f"k{depth}", f"x{depth}"
        if origin is list or (origin is tuple and args[-1] is Ellipsis):
            item = convert(args[0], x, depth + 1)
            if reading and origin is tuple:
                return f"tuple({v})" if item == x else f"tuple([{item} for {x} in {v}])"
            return f"list({v})" if item == x else f"[{item} for {x} in {v}]"
        if origin is tuple:
            items = ", ".join(convert(arg, f"{v}[{i}]", depth) for i, arg in enumerate(args))
            return f"({items},)" if reading else f"[{items}]"
        if origin is dict and args[0] is str:
            item = convert(args[1], x, depth + 1)
            return f"dict({v})" if item == x else f"{{{k}: {item} for {k}, {x} in {v}.items()}}"
        inner = _optional(tp)
        if inner is not None:
            converted = convert(inner, v, depth)
            return v if converted == v else f"(None if {v} is None else {converted})"
        raise TypeError(f"no JSON form for {tp!r}")

    def _default(self, f: Field[Any]) -> str:
        if f.default is not MISSING:
            return self._constant(f.default)
        factory = f.default_factory
        if factory is dict:
            return "{}"
        if factory is list:
            return "[]"
        return f"{self._constant(factory)}()"

    def _array_fields(
        self, cls: type[Any], order: Sequence[str] | None
    ) -> list[tuple[Field[Any], bool]]:
        """The fields of an array form in its order, each with whether it is spread."""
        by_name = {f.name: f for f in fields(cls)}
        names = list(by_name) if order is None else list(order)
        spread = [name.startswith("*") for name in names]
        names = [name.removeprefix("*") for name in names]
        if sorted(names) != sorted(by_name) or any(spread[:-1]):
            raise TypeError(f"{cls.__name__}: an array names every field once, spreads the last")
        return [(by_name[name], s) for name, s in zip(names, spread, strict=True)]


def _optional(tp: Any) -> Any:
    """``X`` of ``X | None``, else None."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [arg for arg in get_args(tp) if arg is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0]
    return None
