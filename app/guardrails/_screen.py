"""Screening an answer's text with the output rules: what each rule finds, which finds
hold (the earliest first, the longest of those that start together, then the rule
listed first; none overlaps another), and what the text becomes.

Pure and deterministic: the same text and rules give the same result, whatever the
machine. Only rule names and detector kinds are ever reported, never the text found.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from app.guardrails._detectors import DETECTORS, MAX_WIDTH, Detector

Action = Literal["block", "redact", "flag"]


class RuleSpec(Protocol):
    """What a configured rule says (``app.guardrails.config.GuardrailRule``)."""

    @property
    def name(self) -> str: ...
    @property
    def action(self) -> Action: ...
    @property
    def detect(self) -> Sequence[str]: ...
    @property
    def keywords(self) -> Sequence[str]: ...
    @property
    def patterns(self) -> Sequence[str]: ...
    @property
    def routes(self) -> Sequence[str] | None: ...
    @property
    def tenants(self) -> Sequence[str] | None: ...


def check_pattern(pattern: str) -> re.Pattern[str]:
    """Compile a configured pattern; ValueError when it does not compile or may match
    more than :data:`MAX_WIDTH` characters (a stream is screened within that width)."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern {pattern!r}: {exc}") from None
    parser: Any = importlib.import_module("re._parser")
    widest = parser.parse(pattern).getwidth()[1]
    if widest > MAX_WIDTH:
        raise ValueError(
            f"pattern {pattern!r} may match more than {MAX_WIDTH} characters: bound its "
            "repetitions (e.g. {1,40} rather than + or *)"
        )
    return compiled


def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    body = r"\s{1,4}".join(re.escape(word) for word in keyword.split())
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Finder:
    kind: str
    pattern: re.Pattern[str]
    detector: Detector | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    """A compiled rule: its name, action and finders, in the order configured."""

    name: str
    action: Action
    finders: tuple[_Finder, ...]


@dataclass(frozen=True, slots=True)
class Rules:
    rules: tuple[Rule, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rules)


_compiled: dict[tuple[int, str, str | None], tuple[Sequence[RuleSpec], Rules]] = {}


def rules_for(specs: Sequence[RuleSpec], route: str, tenant: str | None) -> Rules:
    """The rules of ``specs`` that apply to a request of ``route`` and ``tenant``, in
    their configured order (compiled once per list, route and tenant)."""
    key = (id(specs), route, tenant)
    cached = _compiled.get(key)
    if cached is not None and cached[0] is specs:
        return cached[1]
    rules = compile_rules(
        spec
        for spec in specs
        if (spec.routes is None or route in spec.routes)
        and (spec.tenants is None or tenant in spec.tenants)
    )
    if len(_compiled) > 4096:
        _compiled.clear()
    _compiled[key] = (specs, rules)  # the list kept alive: its id is not reused
    return rules


def compile_rules(specs: Iterable[RuleSpec]) -> Rules:
    """Compile configured rules once (their patterns were checked when configured)."""
    rules = []
    for spec in specs:
        finders = [_Finder(name, DETECTORS[name].pattern, DETECTORS[name]) for name in spec.detect]  # type: ignore[index]
        finders += [_Finder("keyword", _keyword_pattern(k)) for k in spec.keywords]
        finders += [_Finder("pattern", check_pattern(p)) for p in spec.patterns]
        rules.append(Rule(spec.name, spec.action, tuple(finders)))
    return Rules(tuple(rules))


@dataclass(frozen=True, slots=True)
class Find:
    """A span a rule found: ``[start, end)`` of the text, the rule's position and kind."""

    start: int
    end: int
    rule: int
    kind: str


def find(text: str, rules: Rules, pos: int = 0) -> list[Find]:
    """The finds that hold in ``text[pos:]`` (lookbehinds see before ``pos``), in order."""
    found = []
    for index, rule in enumerate(rules.rules):
        for finder in rule.finders:
            for match in finder.pattern.finditer(text, pos):
                if match.end() == match.start():
                    continue
                if finder.detector is None or finder.detector.valid(match.group()):
                    found.append(Find(match.start(), match.end(), index, finder.kind))
    found.sort(key=lambda f: (f.start, -f.end, f.rule))
    held: list[Find] = []
    for candidate in found:
        if not held or candidate.start >= held[-1].end:
            held.append(candidate)
    return held


def replacement(find: Find) -> str:
    return f"[REDACTED:{find.kind}]"


@dataclass(frozen=True, slots=True)
class Screened:
    """The text as the rules leave it, the rules that fired (``name:action``, in the
    order they first fired) and the blocking rule's name, if one blocked."""

    text: str
    fired: tuple[str, ...] = ()
    blocked: str | None = None


def apply(
    text: str, finds: Sequence[Find], rules: Rules, start: int = 0, end: int | None = None
) -> str:
    """``text[start:end]`` with the redacting finds inside it replaced."""
    end = len(text) if end is None else end
    pieces, at = [], start
    for found in finds:
        if found.start < start or found.end > end:
            continue
        if rules.rules[found.rule].action == "redact":
            pieces += [text[at : found.start], replacement(found)]
            at = found.end
    pieces.append(text[at:end])
    return "".join(pieces)


def fired(finds: Iterable[Find], rules: Rules) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for found in finds:
        rule = rules.rules[found.rule]
        names.setdefault(f"{rule.name}:{rule.action}", None)
    return tuple(names)


def blocking(finds: Iterable[Find], rules: Rules) -> str | None:
    return next(
        (rules.rules[f.rule].name for f in finds if rules.rules[f.rule].action == "block"), None
    )


def screen(text: str, rules: Rules) -> Screened:
    """Screen a whole text."""
    finds = find(text, rules)
    blocked = blocking(finds, rules)
    if blocked is not None:
        return Screened("", fired(finds, rules), blocked)
    return Screened(apply(text, finds, rules), fired(finds, rules))
