"""An Anthropic Messages body as an OpenAI chat-completions body (pure).

The chat body then goes the chat completions' way (app/gateway/translate.py), so a
Messages request is the same request event as any other. Translated:

* ``system`` (a string, or text blocks: joined by a blank line unless one carries a
  ``cache_control``, then text parts) → a leading ``system`` message;
* ``messages``: text → text parts, images (base64 or URL) → ``image_url`` parts,
  ``tool_use`` → the assistant message's ``tool_calls``, ``tool_result`` → ``tool``
  messages (before the rest of their user turn; an image in a tool result goes to that
  user turn, as a tool message takes only text); ``thinking`` and ``redacted_thinking``
  blocks of earlier answers are dropped (no OpenAI provider reads them);
* ``max_tokens``, ``temperature``, ``stop_sequences`` (→ ``stop``), ``stream``;
* ``tools`` (``input_schema`` → a function's ``parameters``), ``tool_choice`` (``auto``,
  ``any`` → ``required``, ``tool`` → a named function, ``none``);
* ``metadata.user_id`` → ``user`` (the event's ``metadata.user``);
* ``output_config.format`` (a JSON schema) → ``response_format`` ``json_schema``;
* ``cache_control`` stays where OpenRouter takes it in the OpenAI format: on the text or
  image part, on the tool; on a tool result, on its tool message's last text part (a
  mark on a ``tool_use`` block has no place in ``tool_calls`` and is dropped); the
  top-level ``cache_control`` marks the last part of the last message with content;
* ``system`` messages among ``messages`` → ``system`` messages there;
* Switchyard's own ``session_id``, ``routing``, ``provider`` and ``preset`` as they are.

Refused with a 400 naming the field: what would otherwise be answered wrongly —
``max_tokens: 0`` (warming the cache without an answer),
``document`` and other block types an OpenAI provider cannot take, server tools
(``web_search_...``, ``bash_...``: a ``type`` other than ``custom``), ``mcp_servers``.
Ignored, as chat completions ignore what the event cannot carry: ``top_p``, ``top_k``,
``thinking`` (the answer has no thinking blocks), ``output_config.effort``,
``service_tier``, ``speed``, ``inference_geo``, ``container``, ``diagnostics``,
``tool_choice.disable_parallel_tool_use``, a tool result's ``is_error``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from app.gateway.errors import GatewayError, invalid

#: Switchyard's own body fields, carried as chat completions carry them.
SWITCHYARD_FIELDS = ("session_id", "routing", "provider", "preset")
#: Blocks of an earlier answer no OpenAI-compatible provider reads: dropped.
DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
CACHE_CONTROL = "cache_control"
UNSUPPORTED = "unsupported_parameter"


def chat_body(body: Any) -> dict[str, Any]:
    """The OpenAI chat-completions body of a Messages body; GatewayError(400) naming the
    field for anything Anthropic's API would refuse or this gateway cannot serve."""
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object", "invalid_body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _field("model", "a model name is required (a route, alias or provider:model)")
    max_tokens = body.get("max_tokens")
    if max_tokens == 0 and not isinstance(max_tokens, bool):
        raise _unsupported("max_tokens", "0 (warming the prompt cache, no answer) is not supported")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise _field("max_tokens", "a whole number of at least 1 is required")
    if body.get("mcp_servers"):
        raise _unsupported("mcp_servers", "MCP servers are not supported")
    chat: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    chat["messages"] = [*_system(body.get("system")), *_messages(body.get("messages"))]
    if body.get("cache_control") is not None:
        _mark_last_block(chat["messages"], body["cache_control"])
    if body.get("temperature") is not None:
        chat["temperature"] = _temperature(body["temperature"])
    stops = stop_sequences(body)
    if stops:
        chat["stop"] = stops
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    output_format = _output_format(body.get("output_config"))
    if output_format is not None:
        chat["response_format"] = output_format
    user = _user(body.get("metadata"))
    if user is not None:
        chat["user"] = user
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _field("stream", "must be true or false")
    if stream:
        chat["stream"] = True
    chat.update({k: body[k] for k in SWITCHYARD_FIELDS if body.get(k) is not None})
    return chat


def stop_sequences(body: Any) -> list[str]:
    """The body's ``stop_sequences`` (checked: a list of non-empty strings)."""
    stops = body.get("stop_sequences") if isinstance(body, dict) else None
    if stops is None:
        return []
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise _field("stop_sequences", "must be a list of non-empty strings")
    return list(stops)


def _system(system: Any, field: str = "system") -> list[dict[str, Any]]:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if not isinstance(system, list):
        raise _field(field, "must be a string or a list of text blocks")
    parts = []
    for index, block in enumerate(system):
        where = f"{field}.{index}"
        if _kind(block, where) != "text":
            raise _field(where, "the system prompt takes text blocks only")
        parts.append(_text_part(block, where))
    if not parts:
        return []
    if any(CACHE_CONTROL in part for part in parts):
        return [{"role": "system", "content": parts}]
    return [{"role": "system", "content": "\n\n".join(part["text"] for part in parts)}]


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise _field("messages", "a non-empty list of messages is required")
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict):
            raise _field(where, "must be an object with role and content")
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant", "system"):
            raise _field(f"{where}.role", "must be 'user', 'assistant' or 'system'")
        if role == "system":
            out += _system(content, f"{where}.content")
        elif isinstance(content, str):
            out.append({"role": role, "content": content})
        elif not isinstance(content, list) or not content:
            raise _field(f"{where}.content", "must be a string or a non-empty list of blocks")
        elif role == "user":
            out += _user_turn(content, where)
        else:
            out += _assistant_turn(content, where)
    return out


def _mark_last_block(messages: list[dict[str, Any]], mark: Any) -> None:
    """The top-level ``cache_control``: a mark on the last block of the request (the last
    part of the last message with content)."""
    for message in reversed(messages):
        content = message.get("content")
        if isinstance(content, str) and content:
            message["content"] = [{"type": "text", "text": content, CACHE_CONTROL: mark}]
            return
        if isinstance(content, list) and content:
            content[-1] = {**content[-1], CACHE_CONTROL: mark}
            return


def _user_turn(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """Tool results first (as ``tool`` messages, which must follow the assistant's tool
    calls), then the rest of the turn as one user message."""
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    moved: list[dict[str, Any]] = []  # images of tool results
    for block, at, kind in _blocks(blocks, where):
        if kind == "text":
            parts.append(_text_part(block, at))
        elif kind == "image":
            parts.append(_image_part(block, at))
        elif kind == "tool_result":
            message, images = _tool_result(block, at)
            tools.append(message)
            moved += images
        else:
            raise _block_not_supported(kind, at)
    rest = parts + moved
    if not rest:
        return tools
    if len(rest) == 1 and rest[0]["type"] == "text" and CACHE_CONTROL not in rest[0]:
        return [*tools, {"role": "user", "content": rest[0]["text"]}]
    return [*tools, {"role": "user", "content": rest}]


def _assistant_turn(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block, at, kind in _blocks(blocks, where):
        if kind == "text":
            parts.append(_text_part(block, at))
        elif kind == "tool_use":
            calls.append(_tool_call(block, at))
        elif kind not in DROPPED_BLOCKS:
            raise _block_not_supported(kind, at)
    if not parts and not calls:
        return []  # only thinking: nothing an OpenAI provider reads
    message: dict[str, Any] = {"role": "assistant"}
    if any(CACHE_CONTROL in part for part in parts):
        message["content"] = parts
    else:
        message["content"] = "".join(part["text"] for part in parts) if parts else None
    if calls:
        message["tool_calls"] = calls
    return [message]


def _blocks(blocks: list[Any], where: str) -> Iterator[tuple[dict[str, Any], str, str]]:
    """Each content block of ``where``, with its path (``where.content.N``) and its type."""
    for index, block in enumerate(blocks):
        at = f"{where}.content.{index}"
        kind = _kind(block, at)
        yield block, at, kind


def _kind(block: Any, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _field(where, "a content block is an object with a type")
    return str(block["type"])


def _marked(part: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    if block.get(CACHE_CONTROL) is not None:
        part[CACHE_CONTROL] = block[CACHE_CONTROL]
    return part


def _text_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    text = block.get("text")
    if not isinstance(text, str):
        raise _field(f"{where}.text", "a text block needs its text")
    return _marked({"type": "text", "text": text}, block)


def _image_part(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, dict):
        raise _field(f"{where}.source", "an image block needs its source")
    if source.get("type") == "base64":
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise _field(f"{where}.source", "a base64 image needs media_type and data")
        url = f"data:{media};base64,{data}"
    elif source.get("type") == "url":
        found = source.get("url")
        if not isinstance(found, str) or not found:
            raise _field(f"{where}.source.url", "an image URL is required")
        url = found
    else:
        raise _unsupported(f"{where}.source", "images come as base64 data or a URL")
    return _marked({"type": "image_url", "image_url": {"url": url}}, block)


def _tool_result(block: dict[str, Any], where: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``tool`` message of a tool result, and the images it carried."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise _field(f"{where}.tool_use_id", "a tool result names its tool_use_id")
    content = block.get("content")
    texts: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for item, at, kind in _blocks(content, where):
            if kind == "text":
                texts.append(_text_part(item, at))
            elif kind == "image":
                images.append(_image_part(item, at))
            else:
                raise _block_not_supported(kind, at)
    elif content is not None:
        raise _field(f"{where}.content", "must be a string or a list of text and image blocks")
    if block.get(CACHE_CONTROL) is not None:
        if not texts:
            texts.append({"type": "text", "text": ""})
        texts[-1] = {**texts[-1], CACHE_CONTROL: block[CACHE_CONTROL]}
    message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id}
    if any(CACHE_CONTROL in part for part in texts):
        message["content"] = texts
    else:
        message["content"] = "".join(part["text"] for part in texts)
    return message, images


def _tool_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not call_id:
        raise _field(f"{where}.id", "a tool_use block needs its id")
    if not isinstance(name, str) or not name:
        raise _field(f"{where}.name", "a tool_use block needs its name")
    if not isinstance(arguments, dict):
        raise _field(f"{where}.input", "must be an object")
    function = {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}
    return {"id": call_id, "type": "function", "function": function}


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise _field("tools", "must be a list of tools")
    out = []
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(tool, dict):
            raise _field(where, "a tool is an object with name and input_schema")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            message = f"server tools ({kind!r}) are not supported: only custom tools"
            raise _unsupported(f"{where}.type", message)
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not name:
            raise _field(f"{where}.name", "a tool needs its name")
        if not isinstance(schema, dict):
            raise _field(f"{where}.input_schema", "a tool needs its input_schema (an object)")
        function: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append(_marked({"type": "function", "function": function}, tool))
    return out


def _tool_choice(choice: Any) -> str | dict[str, Any]:
    if not isinstance(choice, dict):
        raise _field("tool_choice", "must be an object with a type")
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return str(kind)
    if kind == "any":
        return "required"
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise _field("tool_choice.name", "a tool choice of type 'tool' names the tool")
        return {"type": "function", "function": {"name": name}}
    raise _field("tool_choice.type", "must be 'auto', 'any', 'tool' or 'none'")


def _output_format(config: Any) -> dict[str, Any] | None:
    """``output_config.format`` (a JSON schema the answer follows) as a ``response_format``."""
    if config is None:
        return None
    if not isinstance(config, dict):
        raise _field("output_config", "must be an object")
    found = config.get("format")
    if found is None:
        return None
    if not isinstance(found, dict) or found.get("type") != "json_schema":
        raise _field("output_config.format.type", "must be 'json_schema'")
    if not isinstance(found.get("schema"), dict):
        raise _field("output_config.format.schema", "a JSON schema (an object) is required")
    schema = {"name": "output", "schema": found["schema"], "strict": True}
    return {"type": "json_schema", "json_schema": schema}


def _temperature(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise _field("temperature", "must be a number from 0 to 1")
    return float(value)


def _user(metadata: Any) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise _field("metadata", "must be an object")
    extra = sorted(set(metadata) - {"user_id"})
    if extra:
        raise _field(f"metadata.{extra[0]}", "extra inputs are not permitted (only user_id)")
    user = metadata.get("user_id")
    if user is not None and not isinstance(user, str):
        raise _field("metadata.user_id", "must be a string")
    return user or None


def _field(field: str, message: str) -> GatewayError:
    return invalid(f"{field}: {message}", "invalid_request")


def _unsupported(field: str, message: str) -> GatewayError:
    return invalid(f"{field}: {message}", UNSUPPORTED)


def _block_not_supported(kind: str, where: str) -> GatewayError:
    return _unsupported(where, f"content blocks of type {kind!r} are not supported here")
