"""What request analysis hands routing, as data: the request's features and domain.

The models only; :mod:`app.understanding` computes them (docs/design.md#routing; its
rule tables say what each field means). They sit here, in the
event contract, which depends on nothing but pydantic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

LengthBucket = Literal["short", "medium", "long", "very_long"]
Modality = Literal["text", "image", "audio"]


#: The 15 domains of request understanding, in their table's order: also the tie-break
#: order (app/understanding/domains.py detects them).
DOMAIN_ORDER: tuple[str, ...] = (
    "math",
    "coding",
    "reasoning",
    "image",
    "voice",
    "transcription",
    "translation",
    "vision",
    "embedding",
    "medical",
    "finance",
    "science",
    "classification",
    "sentiment",
    "legal",
)


class DomainMatch(BaseModel):
    """The detected domain and why, for the decision trace. Holds no prompt text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    domain: str
    #: Matches per domain, every domain with at least one, in table order.
    counts: dict[str, int]
    #: ``most_matches``, or ``tie_table_order`` when several domains share the top count.
    rule: Literal["most_matches", "tie_table_order"]
    #: Domains sharing the top count, in table order (the winner first); empty without a tie.
    tied: list[str]
    #: The winning domain's rules that matched (``domain.rule``), sorted.
    patterns: list[str]


class Features(BaseModel):
    """What routing may know about a prompt, without its text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``RULES_VERSION`` (app/understanding/features.py) of the rules that computed these.
    rules_version: str
    task_type: str
    #: The detection behind ``task_type`` (counts per domain, rule), None for ``general``.
    domain: DomainMatch | None
    has_code: bool
    is_creative: bool
    is_realtime: bool
    length_bucket: LengthBucket
    prompt_chars: int
    modality: Modality
    input_modalities: list[str]
    requested_modalities: list[str]
