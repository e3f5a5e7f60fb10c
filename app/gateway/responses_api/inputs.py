"""A ``POST /v1/responses`` body read as what a chat request is made of (pure).

``input`` (a string, or a list of input items) becomes chat messages: a message item
(``user``, ``system``, ``developer`` or ``assistant``; text and image parts) a message,
``function_call`` items an assistant message's ``tool_calls``, a
``function_call_output`` a ``tool`` message; ``reasoning`` items are left out (no
provider behind chat completions takes them back). ``instructions`` is the turn's
system message. ``max_output_tokens`` is ``max_tokens``; ``temperature``, ``metadata``,
``user``, ``tools`` (function tools), ``tool_choice`` and ``text.format`` carry over
(app/gateway/responses_api/tools.py), as do Switchyard's own ``session_id``,
``provider``, ``routing`` and ``preset``. What the gateway cannot do is a 400, never
ignored silently: ``background``, ``conversation``, ``prompt``, ``truncation: auto``,
hosted tools, file and audio inputs, item references.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.gateway.errors import invalid
from app.gateway.responses_api import tools

#: Switchyard's own body fields, passed as for chat completions.
OWN: tuple[str, ...] = ("session_id", "provider", "routing", "preset")
#: Message roles an input message may have.
ROLES = ("user", "system", "developer", "assistant")
#: Content parts that are text.
TEXT_PARTS = ("input_text", "output_text", "text")


@dataclass(frozen=True)
class Asked:
    """A Responses body, read."""

    #: A chat completions body but its ``messages``.
    chat: dict[str, Any]
    #: The new input, as chat messages.
    input: list[dict[str, Any]]
    instructions: str | None
    previous_response_id: str | None
    store: bool
    stream: bool


def read(body: Any) -> Asked:
    """What a Responses body asks for; GatewayError(400) for what is not supported."""
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object", "invalid_body")
    _refuse_unsupported(body)
    chat: dict[str, Any] = {k: body[k] for k in (*OWN, "model", "metadata", "user") if k in body}
    for name, value in (
        ("max_tokens", body.get("max_output_tokens")),
        ("temperature", body.get("temperature")),
        ("tools", tools.chat_tools(body.get("tools"))),
        ("tool_choice", tools.chat_tool_choice(body.get("tool_choice"))),
        ("response_format", tools.response_format(body.get("text"))),
    ):
        if value is not None:
            chat[name] = value
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("instructions must be a string", "invalid_instructions")
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise invalid("previous_response_id must be a response id", "invalid_previous_response")
    return Asked(
        chat=chat,
        input=messages(body.get("input")),
        instructions=instructions or None,
        previous_response_id=previous,
        store=_flag(body, "store", True),
        stream=_flag(body, "stream", False),
    )


def _refuse_unsupported(body: dict[str, Any]) -> None:
    if body.get("background"):
        raise invalid("background responses are not supported", "unsupported_parameter")
    for name in ("conversation", "prompt"):
        if body.get(name) is not None:
            message = f"{name} is not supported here (previous_response_id is)"
            raise invalid(message, "unsupported_parameter")
    if body.get("truncation") not in (None, "disabled"):
        raise invalid("truncation: only 'disabled' is supported", "unsupported_parameter")


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false", "invalid_body")
    return value


def messages(value: Any) -> list[dict[str, Any]]:
    """The chat messages of a Responses ``input``."""
    if isinstance(value, str):
        if not value:
            raise invalid("input must not be empty", "invalid_input")
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise invalid("input: a string or a non-empty list of input items", "invalid_input")
    found: list[dict[str, Any]] = []
    for item in value:
        if not isinstance(item, dict):
            raise invalid("input: every item is an object", "invalid_input")
        kind = item.get("type", "message")
        if kind == "message":
            found.append(_message(item))
        elif kind == "function_call":
            _add_call(found, item)
        elif kind == "function_call_output":
            found.append(_call_output(item))
        elif kind != "reasoning":  # reasoning: nothing a chat provider takes back
            message = f"input: items of type {str(kind)[:40]!r} are not supported"
            raise invalid(message, "unsupported_input_item")
    if not found:
        raise invalid("input: no message in it", "invalid_input")
    return found


def _message(item: dict[str, Any]) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        raise invalid(f"input: a message's role is one of {', '.join(ROLES)}", "invalid_input")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise invalid("input: a message's content is a string or a list", "invalid_input")
    parts = [_part(part, role) for part in content]
    if all(part["type"] == "text" for part in parts):
        return {"role": role, "content": "".join(part["text"] for part in parts)}
    return {"role": role, "content": parts}


def _part(part: Any, role: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in TEXT_PARTS and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal" and role == "assistant" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image" and role != "assistant" and isinstance(part.get("image_url"), str):
        image = {"url": part["image_url"], "detail": part.get("detail") or "auto"}
        return {"type": "image_url", "image_url": image}
    message = f"input: content parts of type {str(kind)[:40]!r} are not supported"
    raise invalid(message, "unsupported_content")


def _add_call(found: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """A ``function_call`` item: a tool call of the assistant message it follows (a new
    one when the last message is not an assistant's)."""
    call_id, name = item.get("call_id"), item.get("name")
    arguments = item.get("arguments", "")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
        raise invalid("input: a function_call has call_id, name and arguments", "invalid_input")
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = found[-1] if found else None
    if last is not None and last["role"] == "assistant":
        last["tool_calls"] = [*last.get("tool_calls", []), call]
        last.setdefault("content", None)
    else:
        found.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _call_output(item: dict[str, Any]) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if isinstance(output, list):  # text parts
        output = "".join(p.get("text", "") for p in output if isinstance(p, dict))
    if not isinstance(call_id, str) or not isinstance(output, str):
        raise invalid("input: a function_call_output has call_id and output", "invalid_input")
    return {"role": "tool", "tool_call_id": call_id, "content": output}
