"""The guardrails' part of the policy (``guardrails:`` in providers.yaml): forbidden
keywords, and the rules on the requests' and the answers' text."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.guardrails._screen import check_pattern


class GuardrailRule(BaseModel):
    """A rule on the requests' or the answers' text (app/guardrails/): what it looks for —
    built-in detectors of personal data and secrets, keywords (whole words, any case),
    regular expressions (each match at most 256 characters) — and what it does:
    ``block`` the request or the answer, ``redact`` what it found, or ``flag`` it.
    Scoped to ``routes`` and ``tenants`` when given (None: all)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    action: Literal["block", "redact", "flag"]
    detect: list[Literal["email", "phone", "card_number", "iban", "api_key"]] = Field(
        default_factory=list
    )
    keywords: list[str] = Field(default_factory=list)
    patterns: list[str] = Field(default_factory=list)
    routes: list[str] | None = None
    tenants: list[str] | None = None

    @model_validator(mode="after")
    def _looks_for_something(self) -> GuardrailRule:
        if not (self.detect or self.keywords or self.patterns):
            raise ValueError(f"guardrail {self.name!r}: detect, keywords or patterns")
        for pattern in self.patterns:
            check_pattern(pattern)
        if any(not keyword.split() for keyword in self.keywords):
            raise ValueError(f"guardrail {self.name!r}: an empty keyword")
        return self


class Guardrails(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Requests containing one of these words are refused without a provider call.
    forbidden_keywords: list[str] = Field(default_factory=list)
    #: Rules on the requests' messages: a block refuses the request before any provider
    #: call, a redaction rewrites what the provider is sent (app/guardrails/).
    input: list[GuardrailRule] = Field(default_factory=list)
    #: Rules on the answers, applied by the executor in this order (app/guardrails/).
    output: list[GuardrailRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names_once(self) -> Guardrails:
        for side, rules in (("input", self.input), ("output", self.output)):
            names = [rule.name for rule in rules]
            if len(names) != len(set(names)):
                raise ValueError(f"{side} guardrails: each name once")
        return self
