"""Records (dataclasses) to and from JSON values, derived from their fields.

A record is written as an object of its fields, in field order, each by its type hint:
numbers, strings and booleans as they are, an enum as its value, lists and tuples as
arrays, dicts (string keys) as objects, a record in its own form, ``X | None`` as either.
Read back, every value is made its field's type again (JSON does not tell ``1`` from
``1.0``, nor a tuple from a list) and a missing key takes the field's default (a field
without one must be there). Strings are taken as they are: the values read are trusted
to be what this codec wrote. A :class:`Format` names where a stored format departs from
that: fields left out at their default, records written as arrays, records whose fields
are written inline in their parent's object, keys written elsewhere than in their
field's place, values written by hand, older forms brought up to date before they are
read.

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
    #: Record fields written inline, by ``(class, field name)``: the fields of the record
    #: that field holds are keys of the class's own object, in that field's place and
    #: order, each under its own name or the key given here (by field name), left out at
    #: their default as the record's class says (``sparse``), and read back from there. The
    #: record's class is written as an object of its fields elsewhere (no array, nothing by
    #: hand, no upgrade).
    inline: Mapping[tuple[type[Any], str], Mapping[str, str]] = field(default_factory=dict)
    #: Keys of a class's object written after another key instead of in their field's
    #: place (a record written inline may have its fields apart): by class, each key and
    #: the key it follows, moved in the order given.
    after: Mapping[type[Any], Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Member:
    """A key of a class's object form: a field of the class, or of a record written
    inline (``path``: the attributes from the class's value to it)."""

    key: str
    path: str
    owner: type[Any]
    field: Field[Any]
    hint: Any
    sparse: bool


class Codec:
    """The encoder and decoder of each record class under one :class:`Format`."""

    def __init__(self, form: Format) -> None:
        self._form = form
        #: The generated functions and what they refer to.
        self._scope: dict[str, Any] = {}
        #: Name in ``_scope`` of each generated function (by kind and class) and constant.
        self._names: dict[tuple[str, object], str] = {}
        self._members_of: dict[type[Any], list[_Member]] = {}

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
        members = self._members(cls)
        if not any(m.sparse for m in members):
            return f"def {name}(o):\n    return {self._display(cls, 'o', 0)}\n"
        lines: list[str] = []
        literal: list[str] = []
        for m in members:
            hint = m.hint
            if m.sparse and m.field.default is None:
                hint = _optional(hint) or hint  # written only when it is not None
            key, value = repr(m.key), self._write_member(m, hint, "o", 0)
            if not m.sparse and not lines:
                literal.append(f"{key}: {value}")
                continue
            if not lines:
                lines.append(f"    row = {{{', '.join(literal)}}}")
            if m.sparse:
                lines.append(f"    if {self._away(m.field, f'o.{m.path}')}:")
                lines.append(f"        row[{key}] = {value}")
            else:
                lines.append(f"    row[{key}] = {value}")
        return "\n".join([f"def {name}(o):", *lines, "    return row", ""])

    def _display(self, cls: type[Any], o: str, depth: int) -> str:
        """An object or array display writing record ``o`` (a name) of ``cls``, which
        leaves no field out."""
        if cls in self._form.arrays:
            hints = get_type_hints(cls)
            items = []
            for f, spread in self._array_fields(cls, self._form.arrays[cls]):
                value = self._write_field(cls, f, hints[f.name], f"{o}.{f.name}", depth)
                items.append(f"*{value}" if spread else value)
            return f"[{', '.join(items)}]"
        items = [
            f"{m.key!r}: {self._write_member(m, m.hint, o, depth)}" for m in self._members(cls)
        ]
        return f"{{{', '.join(items)}}}"

    def _write_member(self, m: _Member, hint: Any, o: str, depth: int) -> str:
        return self._write_field(m.owner, m.field, hint, f"{o}.{m.path}", depth)

    def _write_field(self, cls: type[Any], f: Field[Any], hint: Any, value: str, depth: int) -> str:
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
            if v.isidentifier() and not any(m.sparse for m in self._members(tp)):
                return self._display(tp, v, depth)  # written in place: no call
            return f"{self._function('enc', tp)}({v})"
        return self._container(tp, v, depth, self._write, reading=False)

    def _sparse(self, cls: type[Any]) -> set[str]:
        sparse = set(self._form.sparse.get(cls, ()))
        unknown = sparse - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
        return sparse

    def _members(self, cls: type[Any]) -> list[_Member]:
        """The keys of ``cls``'s object form, in order, with the fields they write."""
        found = self._members_of.get(cls)
        if found is not None:
            return found
        hints = get_type_hints(cls)
        sparse = self._sparse(cls)
        members: list[_Member] = []
        for f in fields(cls):
            keys = self._form.inline.get((cls, f.name))
            if keys is None:
                members.append(_Member(f.name, f.name, cls, f, hints[f.name], f.name in sparse))
                continue
            inner = hints[f.name]
            form = self._form
            if (
                not (isinstance(inner, type) and is_dataclass(inner))
                or cls in form.arrays
                or f.name in sparse
                or {inner, (cls, f.name)} & {*form.custom, *form.arrays, *form.upgrades}
            ):
                raise TypeError(f"{cls.__name__}.{f.name} cannot be written inline")
            for m in self._members(inner):
                key = keys.get(m.path, m.key) if "." not in m.path else m.key
                members.append(
                    _Member(key, f"{f.name}.{m.path}", m.owner, m.field, m.hint, m.sparse)
                )
        by_key = {m.key: m for m in members}
        if len(by_key) != len(members):
            raise TypeError(f"{cls.__name__}: two fields are written under the same key")
        for key, previous in self._form.after.get(cls, {}).items():
            if key not in by_key or previous not in by_key or key == previous:
                raise TypeError(f"{cls.__name__}: {key} cannot follow {previous}")
            members.remove(by_key[key])
            members.insert(members.index(by_key[previous]) + 1, by_key[key])
        self._members_of[cls] = members
        return members

    def _away(self, f: Field[Any], v: str) -> str:
        """A test that field ``f``, of value ``v`` (an attribute), is away from its default."""
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            raise TypeError(f"{f.name} is left out at its default and has none")
        if default is None:
            return f"{v} is not None"
        if type(default) in _FALSY_WHEN_EMPTY and not default:
            return v
        return f"{v} != {self._constant(default)}"

    # ------------------------------------------------------------------ reading

    def _decoder_source(self, cls: type[Any], name: str) -> str:
        upgrade = self._form.upgrades.get(cls)
        lines = [f"def {name}(j):"]
        if upgrade is not None:
            lines.append(f"    j = {self._constant(upgrade)}(j)")
        if cls in self._form.arrays:
            hints = get_type_hints(cls)
            order = self._array_fields(cls, self._form.arrays[cls])
            names = [("*" if spread else "") + f"a_{f.name}" for f, spread in order]
            lines.append(f"    {', '.join(names)}, = j")
            values = {
                f.name: self._read_field(cls, f, hints[f.name], f"a_{f.name}") for f, _ in order
            }
            lines.append(f"    return {self._construct(cls, values)}")
        else:
            members = {m.path: m for m in self._members(cls)}
            lines.append(f"    return {self._construct_object(cls, members, '')}")
        return "\n".join([*lines, ""])

    def _construct_object(self, cls: type[Any], members: Mapping[str, _Member], at: str) -> str:
        """A call building a ``cls`` from object ``j``: the record at path ``at`` of the
        members' (``""``: the value read, or a record written inline in it)."""
        values: dict[str, str] = {}
        for f in fields(cls):
            if (cls, f.name) in self._form.inline:
                inner = get_type_hints(cls)[f.name]
                values[f.name] = self._construct_object(inner, members, f"{at}{f.name}.")
                continue
            m = members[at + f.name]
            key = repr(m.key)
            value = self._read_field(cls, f, m.hint, f"j[{key}]")
            if f.default is not MISSING or f.default_factory is not MISSING:
                value = f"{value} if {key} in j else {self._default(f)}"
            values[f.name] = value
        return self._construct(cls, values)

    def _construct(self, cls: type[Any], values: Mapping[str, str]) -> str:
        if any(f.kw_only for f in fields(cls)):
            arguments = ", ".join(f"{n}={v}" for n, v in values.items())
        else:
            arguments = ", ".join(values[f.name] for f in fields(cls))
        return f"{self._constant(cls)}({arguments})"

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
