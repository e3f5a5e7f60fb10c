"""The auto router's local classifier: deterministic, no model call.

From ingest's features (the domain matches, code syntax, length) and the
request's own facts (``tools``, ``response_format``, the number of turns), a
workload breakdown over seven classes, a complexity in [0, 1] and a confidence:

* signals: ``code`` = 2 x code syntax + coding matches; ``reasoning`` = reasoning
  + math matches; ``tool_use`` = 3 when tools are offered (or tool messages are
  present); ``structured_output`` = 3 for a ``json_schema``/``json_object``
  response format; ``translation`` = translation matches; ``summary`` = summary
  cues (*résume*, *summarize*, *TL;DR*, *synthèse*, *key points*); ``general`` = 1
  (the baseline every request has). The breakdown is each signal's share.
* complexity = 0.6 x Σ share x difficulty + 0.4 x length term + 0.05 per turn
  beyond the first (at most 0.1), clamped to [0, 1]; difficulties: reasoning
  0.8, code 0.7, tool use 0.6, structured output 0.5, translation and summary
  0.3, general 0.2; length term: short 0, medium 0.25, long 0.5, very long 0.8.
* confidence = 0.5 + 0.5 x (largest share − second largest).

A classifier model, were one asked, would return the same structure; this is the
answer used whenever there is none, it fails or it answers something invalid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.contract import RequestAccepted
from app.understanding.text import normalised, request_text

WORKLOADS: tuple[str, ...] = (
    "code",
    "reasoning",
    "tool_use",
    "structured_output",
    "translation",
    "summary",
    "general",
)
DIFFICULTY: dict[str, float] = {
    "code": 0.7,
    "reasoning": 0.8,
    "tool_use": 0.6,
    "structured_output": 0.5,
    "translation": 0.3,
    "summary": 0.3,
    "general": 0.2,
}
LENGTH_TERM: dict[str, float] = {"short": 0.0, "medium": 0.25, "long": 0.5, "very_long": 0.8}
MIX_WEIGHT, LENGTH_WEIGHT, TURN_STEP, TURN_MAX = 0.6, 0.4, 0.05, 0.1
#: Summary cues, matched on the accent-free, case-folded user text (French and English).
SUMMARY = re.compile(
    r"\bresum(?:e|ez|er|es|ing|ons)\b|\bsummar\w*|\btl;?dr\b|\bsynthes\w*"
    r"|\ben\s+bref\b|\bkey\s+(?:points|takeaways)\b|\bpoints\s+cles\b|\bcondense\w*"
)
STRUCTURED_FORMATS = frozenset({"json_schema", "json_object"})


@dataclass(frozen=True, slots=True)
class Classification:
    breakdown: dict[str, float]
    workload: str
    complexity: float
    confidence: float
    source: str = "local"


def _signals(accepted: RequestAccepted) -> dict[str, float]:
    request = accepted.request
    features = accepted.features
    counts = features.domain.counts if features is not None and features.domain else {}
    has_code = features is not None and features.has_code
    tool_turns = any(m.role in {"tool", "function"} for m in request.messages)
    response_format = request.response_format or {}
    _, folded = normalised(request_text(request))
    return {
        "code": 2.0 * has_code + counts.get("coding", 0),
        "reasoning": float(counts.get("reasoning", 0) + counts.get("math", 0)),
        "tool_use": 3.0 if request.tools or tool_turns else 0.0,
        "structured_output": 3.0 if response_format.get("type") in STRUCTURED_FORMATS else 0.0,
        "translation": float(counts.get("translation", 0)),
        "summary": float(len(SUMMARY.findall(folded))),
        "general": 1.0,
    }


def classify(accepted: RequestAccepted) -> Classification:
    signals = _signals(accepted)
    total = sum(signals.values())
    breakdown = {name: round(signals[name] / total, 4) for name in WORKLOADS}
    ranked = sorted(WORKLOADS, key=lambda name: (-signals[name], WORKLOADS.index(name)))
    top, second = signals[ranked[0]] / total, signals[ranked[1]] / total
    mix = sum(signals[name] / total * DIFFICULTY[name] for name in WORKLOADS)
    features = accepted.features
    length = LENGTH_TERM[features.length_bucket] if features is not None else 0.0
    turns = sum(1 for m in accepted.request.messages if m.role == "user")
    extra_turns = min(TURN_MAX, TURN_STEP * max(0, turns - 1))
    complexity = min(1.0, max(0.0, MIX_WEIGHT * mix + LENGTH_WEIGHT * length + extra_turns))
    return Classification(
        breakdown=breakdown,
        workload=ranked[0],
        complexity=round(complexity, 4),
        confidence=round(0.5 + 0.5 * (top - second), 4),
    )
