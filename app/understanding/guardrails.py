"""Guardrails on a request's input (docs/design.md#routing, step 2): forbidden keywords.

**Forbidden keywords.** A configured list; a keyword matches case- and
accent-insensitively (``Édit`` matches ``edit``), as a whole word or phrase:
``kill`` does not match ``skill`` or ``killer``, ``c++`` is found in ``I love C++.``
(word boundaries hold for keywords that start or end with a symbol), and the
words of a phrase may be separated by any whitespace. The first
keyword in *configuration order* that occurs decides (deterministic, whatever
the prompt's order), and the verdict names only that rule and keyword — never
any prompt text around it.

The per-tenant rate limit's windows are routing state: :mod:`app.routing.rate_window`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.understanding.text import fold, prompt_text

#: Exclusion/refusal reasons, as they appear in traces and error codes.
RULE_FORBIDDEN_KEYWORD = "forbidden_keyword"
RULE_RATE_LIMITED = "tenant_rate_limited"


if TYPE_CHECKING:
    from app.contract import ChatRequest


@dataclass(frozen=True, slots=True)
class KeywordRule:
    #: The keyword as configured (this, and only this, may be shown).
    keyword: str
    #: Position in the configured list (1-based), to name the rule.
    index: int
    pattern: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class GuardrailHit:
    """A refusal: which rule, which configured keyword. Never prompt text."""

    rule: str
    keyword: str
    index: int

    @property
    def message(self) -> str:
        return f"request refused by guardrail: forbidden keyword #{self.index} ({self.keyword!r})"


def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    words = fold(keyword).split()
    if not words:
        raise ValueError("a forbidden keyword must not be empty")
    body = r"\s+".join(re.escape(word) for word in words)
    # Lookarounds, not \b: they also delimit keywords that start or end with a symbol.
    return re.compile(rf"(?<!\w){body}(?!\w)")


def compile_keywords(keywords: Sequence[str]) -> tuple[KeywordRule, ...]:
    """Compile the configured list once (ValueError on an empty keyword)."""
    return tuple(
        KeywordRule(keyword, index, _keyword_pattern(keyword))
        for index, keyword in enumerate(keywords, start=1)
    )


def check_forbidden(text: str, rules: Sequence[KeywordRule]) -> GuardrailHit | None:
    """The first rule (configuration order) whose keyword occurs in ``text``, else None."""
    folded = fold(text)
    for rule in rules:
        if rule.pattern.search(folded):
            return GuardrailHit(RULE_FORBIDDEN_KEYWORD, rule.keyword, rule.index)
    return None


def check_request(request: ChatRequest, rules: Sequence[KeywordRule]) -> GuardrailHit | None:
    """:func:`check_forbidden` on every message's text (system prompts included)."""
    return check_forbidden(prompt_text(request), rules)


# --------------------------------------------------------------------------- rate limit
