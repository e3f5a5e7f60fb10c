r"""Rule tables and their compiled form, built for speed on long prompts.

A table has one line per piece of a rule, ``group rule pattern``; the pieces of
a rule are concatenated in order and ``|`` separates alternatives, as in any
regex (:func:`parse_rules`).

Matching is accent- and case-insensitive by folding the *text* (:func:`~app.
understanding.text.fold`), so patterns are written in lower case without accents.
A top-level alternative containing ``(?-i:…)`` is case-sensitive where it says
so (``(?-i:\bROI\b)``): those run, case-insensitively elsewhere, on the
accent-stripped text with its case kept, in a second pass.

Why the folding, and the leading ``\b`` taken out of alternatives: CPython's
regex engine skips an alternative in one step when it starts with a plain
character that is not the one at hand, but not when it starts with ``\b`` or
is case-insensitive. Written ``\b(?:calcul\w*|equations?\b|…)`` over folded
text, a domain scans about eight times faster than ``(?i)\bcalcul\w*|\bequ…``.
Each alternative should therefore start with ``\b``, a line start, or a symbol.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_CASED = "(?-i:"


def parse_rules(table: str) -> dict[str, list[tuple[str, str]]]:
    """Read a rule table; groups and rules keep their first-appearance order."""
    groups: dict[str, dict[str, list[str]]] = {}
    for line in table.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        group, rule, pattern = line.strip().split(maxsplit=2)
        groups.setdefault(group, {}).setdefault(rule, []).append(pattern)
    return {
        group: [(rule, "".join(pieces)) for rule, pieces in rules.items()]
        for group, rules in groups.items()
    }


def split_alternatives(pattern: str) -> list[str]:
    """The top-level alternatives of a regex (``|`` outside groups and classes)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            current.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            # "]" first in a class ("[]…]", "[^]…]") is a literal, not the end.
            start = i + 2 if pattern[i + 1 : i + 2] == "^" else i + 1
            if pattern[start : start + 1] == "]":
                current.append(pattern[i : start + 1])
                i = start + 1
                continue
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append("".join(current))
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _lowercase_only(name: str, alternative: str) -> None:
    literal = re.sub(r"\\.", "", alternative)
    if literal != literal.lower():
        raise ValueError(f"rule {name}: write case-insensitive patterns in lower case")


def _scanner(alternatives: Sequence[str], flags: int) -> re.Pattern[str] | None:
    """One pattern for all ``alternatives``, ``\b`` factored out; None when there are none."""
    words = [a[2:] for a in alternatives if a.startswith(r"\b")]
    others = [a for a in alternatives if not a.startswith(r"\b")]
    branches = ([rf"\b(?:{'|'.join(words)})"] if words else []) + others
    return re.compile("|".join(branches), flags) if branches else None


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Named rules compiled into one scan over folded text (and one over cased text)."""

    scan: re.Pattern[str] | None
    cased_scan: re.Pattern[str] | None
    #: ``(name, folded-text part, cased-text part)``, in table order, to name a match.
    rules: tuple[tuple[str, re.Pattern[str] | None, re.Pattern[str] | None], ...]

    @classmethod
    def build(cls, rules: Sequence[tuple[str, str]]) -> RuleSet:
        folded: list[str] = []
        cased: list[str] = []
        named = []
        for name, body in rules:
            if re.compile(body).groups:
                raise ValueError(f"rule {name}: use (?:…), not capturing groups")
            alternatives = split_alternatives(body)
            mine = [a for a in alternatives if _CASED not in a]
            theirs = [a for a in alternatives if _CASED in a]
            for alternative in mine:
                _lowercase_only(name, alternative)
            folded += mine
            cased += theirs
            named.append((name, _scanner(mine, 0), _scanner(theirs, re.IGNORECASE)))
        return cls(_scanner(folded, 0), _scanner(cased, re.IGNORECASE), tuple(named))

    def hits(self, folded: str, plain: str) -> list[str]:
        """The rule name of every match: non-overlapping in folded text, then in cased text.

        ``folded`` is :func:`~app.understanding.text.fold` of ``plain``, which is
        :func:`~app.understanding.text.strip_accents` of the text.
        """
        names: list[str] = []
        if self.scan is not None:
            names += [self._name(folded, m.start(), False) for m in self.scan.finditer(folded)]
        if self.cased_scan is not None:
            names += [self._name(plain, m.start(), True) for m in self.cased_scan.finditer(plain)]
        return names

    def search(self, folded: str, plain: str) -> bool:
        if self.scan is not None and self.scan.search(folded):
            return True
        return self.cased_scan is not None and self.cased_scan.search(plain) is not None

    def _name(self, text: str, position: int, cased: bool) -> str:
        """The first rule matching where the scan matched (``?`` cannot happen)."""
        for name, folded_part, cased_part in self.rules:
            part = cased_part if cased else folded_part
            if part is not None and part.match(text, position):
                return name
        return "?"
