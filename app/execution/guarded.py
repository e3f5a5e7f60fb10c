"""The output guardrails on one call's answer (app/guardrails/): the call's result as
the rules that apply to its request (``app.guardrails.rules_for``) leave it.

A successful answer is screened choice by choice: a ``block`` rule turns the result
into a final ``client_error`` (``output_blocked: rule NAME``, neutral for the
provider's health, answered as a 400 naming the rule), ``redact`` rewrites the text,
``flag`` leaves it; the rules that fired go into the outcome. The answer recorded on
the routing log and on ``llm.responses`` is the screened one; a streamed answer's
deltas were screened as they came (:class:`app.guardrails.StreamScreen`) to the same
text.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.contract import OUTPUT_BLOCKED, StatusClass
from app.execution.outcome import CallResult
from app.guardrails import Rules, screen


def guard_answer(result: CallResult, rules: Rules) -> CallResult:
    """``result`` with its answer screened by ``rules`` (unchanged without rules or answer)."""
    completion = result.completion
    if not rules or result.status_class is not StatusClass.SUCCESS or completion is None:
        return result
    choices: list[dict[str, Any]] = []
    fired: dict[str, None] = {}
    for choice in completion.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            choices.append(choice)
            continue
        content: str = message["content"]
        screened = screen(content, rules)
        fired.update(dict.fromkeys(screened.fired))
        if screened.blocked is not None:
            return replace(
                result,
                status_class=StatusClass.CLIENT_ERROR,
                completion=None,
                error=f"{OUTPUT_BLOCKED}: the answer was blocked by output rule "
                f"{screened.blocked!r}",
                output_rules=tuple(fired),
            )
        choices.append({**choice, "message": {**message, "content": screened.text}})
    if not fired:
        return result
    return replace(result, completion={**completion, "choices": choices}, output_rules=tuple(fired))
