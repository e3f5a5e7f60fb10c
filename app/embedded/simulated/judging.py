"""The simulated providers as a judge: a judge request gets a parsable score.

A judge request is recognised by its system message, which starts with
:data:`app.grades.judge.JUDGE_MARKER`. The score is deterministic: drawn from the text being
graded (the simulated answers name the model that gave them, so each model gets its own
scores), written the way :func:`app.grades.judge.parse_score` reads it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from app.grades.judge import JUDGE_MARKER


def is_judge_prompt(messages: Sequence[Any]) -> bool:
    first = messages[0] if messages else None
    if not isinstance(first, Mapping) or first.get("role") != "system":
        return False
    content = first.get("content")
    return isinstance(content, str) and content.startswith(JUDGE_MARKER)


def simulated_score(messages: Sequence[Any]) -> float:
    """A score in [0.3, 1.0] with two decimals, from the graded text."""
    text = "".join(str(m.get("content", "")) for m in messages[1:] if isinstance(m, Mapping))
    digest = hashlib.sha256(text.encode("utf-8", "replace")).digest()
    return round(0.3 + 0.7 * int.from_bytes(digest[:4], "big") / 2**32, 2)


def judge_reply(messages: Sequence[Any]) -> str | None:
    """``SCORE: x`` for a judge request, None for any other."""
    if not is_judge_prompt(messages):
        return None
    return f"SCORE: {simulated_score(messages):.2f}"
