"""A conversation's next messages, from its previous turn on the log (pure).

The design's ``append_to_conversation``: the messages of a turn that continues another
(``previous_response_id``) are the previous turn's request messages (its record on
``llm.requests`` holds the whole conversation up to it), its answer (its record on
``llm.responses``) as an assistant message, then the new input. The previous turn's
``instructions`` are not carried over (as OpenAI's Responses API does): its first
message is left out when its ``turn`` says it was its instructions; the new turn's
``instructions``, if any, become the first message.
"""

from __future__ import annotations

from typing import Any

from app.contract import Response
from app.gateway import shape


def next_messages(
    new_input: list[dict[str, Any]],
    instructions: str | None,
    previous: tuple[dict[str, Any], Response] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """(the turn's messages, whether the first is its ``instructions``), from its new
    input and instructions and its previous turn's (request record, answer)."""
    history: list[dict[str, Any]] = []
    if previous is not None:
        record, answer = previous
        history = [*earlier_messages(record), assistant_message(answer)]
    messages = [*history, *new_input]
    if instructions:
        return [{"role": "system", "content": instructions}, *messages], True
    return messages, False


def earlier_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A turn's request messages but its own instructions."""
    messages = [m for m in record.get("messages") or [] if isinstance(m, dict)]
    if (record.get("turn") or {}).get("instructions"):
        return messages[1:]
    return messages


def assistant_message(answer: Response) -> dict[str, Any]:
    """The chat message an answer adds to its conversation."""
    completion = shape.completion_of(answer)
    message = (completion.get("choices") or [{}])[0].get("message") or {}
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    text = shape.text_of(message.get("content"))
    refusal = message.get("refusal")
    if not text and isinstance(refusal, str):
        text = refusal
    found: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        found["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": (call.get("function") or {}).get("name"),
                    "arguments": (call.get("function") or {}).get("arguments") or "",
                },
            }
            for call in calls
        ]
    return found
