"""Tools, tool choice and text format between the Responses API and chat completions (pure).

The Responses API's function tools are flat (``{"type": "function", "name": ...,
"parameters": ...}``), chat's nest them (``{"type": "function", "function": {...}}``);
``tool_choice`` names a function the same two ways; ``text.format`` is chat's
``response_format``. Both directions are here: a request is published in chat's form,
and its Response object shows it in the Responses API's. Only function tools exist in
chat completions: a hosted tool (web search, file search, computer use, MCP, ...) is a
400.
"""

from __future__ import annotations

from typing import Any

from app.gateway.errors import invalid

#: The keys of a function tool both APIs share.
FUNCTION_KEYS = ("name", "description", "parameters", "strict")
#: ``tool_choice`` strings both APIs share.
CHOICES = ("auto", "none", "required")


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """The chat ``tools`` of a Responses ``tools`` list (400 for one that is not a function)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise invalid("tools must be a list", "invalid_tools")
    found = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            message = f"tools: only function tools are supported here, not {str(kind)[:40]!r}"
            raise invalid(message, "unsupported_tool")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise invalid("tools: a function tool needs a name", "invalid_tools")
        function = {k: tool[k] for k in FUNCTION_KEYS if tool.get(k) is not None}
        found.append({"type": "function", "function": function})
    return found or None


def responses_tools(tools: Any) -> list[dict[str, Any]]:
    """The Responses ``tools`` of a request's chat ``tools``."""
    found = []
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict):
            shown = {k: function[k] for k in FUNCTION_KEYS if function.get(k) is not None}
            found.append({"type": "function", **shown})
    return found


def chat_tool_choice(choice: Any) -> str | dict[str, Any] | None:
    if choice is None or choice in CHOICES:
        return choice  # type: ignore[no-any-return]
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name")
        if isinstance(name, str) and name:
            return {"type": "function", "function": {"name": name}}
    message = "tool_choice: 'auto', 'none', 'required' or {'type': 'function', 'name': ...}"
    raise invalid(message, "unsupported_tool_choice")


def responses_tool_choice(choice: Any) -> str | dict[str, Any]:
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return {"type": "function", "name": name}
    return choice if isinstance(choice, str) else "auto"


def response_format(text: Any) -> dict[str, Any] | None:
    """Chat's ``response_format`` for a Responses ``text`` (its ``format``)."""
    if text is None:
        return None
    form = text.get("format") if isinstance(text, dict) else None
    if form is None or (isinstance(form, dict) and form.get("type") == "text"):
        return None
    if isinstance(form, dict) and form.get("type") == "json_object":
        return {"type": "json_object"}
    if isinstance(form, dict) and form.get("type") == "json_schema":
        schema = {k: form[k] for k in ("name", "schema", "description", "strict") if k in form}
        return {"type": "json_schema", "json_schema": schema}
    raise invalid("text.format: 'text', 'json_object' or 'json_schema'", "unsupported_format")


def text_format(form: Any) -> dict[str, Any]:
    """A Response object's ``text`` for a request's chat ``response_format``."""
    if isinstance(form, dict) and form.get("type") == "json_schema":
        schema = form.get("json_schema")
        return {"format": {"type": "json_schema", **(schema if isinstance(schema, dict) else {})}}
    if isinstance(form, dict) and form.get("type") == "json_object":
        return {"format": {"type": "json_object"}}
    return {"format": {"type": "text"}}
