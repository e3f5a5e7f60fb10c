"""The pieces of a streamed answer put together (pure, light: no HTTP client).

Used by the streaming call (app/execution/stream.py), the delta publisher
(app/execution/deltas.py) and the stream reassembly (app/audit/streams.py).
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\\ud800-\\udfff]")


def whole_text(text: str) -> str:
    """``text`` with surrogate halves that came apart paired again; a lone one is U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def merge_tool_call(calls: dict[int, dict[str, Any]], delta: dict[str, Any]) -> None:
    """Add one ``tool_calls`` delta to the calls by index: ids and types set, names and
    arguments concatenated."""
    index = delta.get("index")
    index = index if isinstance(index, int) and not isinstance(index, bool) else len(calls)
    call = calls.setdefault(
        index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
    )
    for name in ("id", "type"):
        if isinstance(delta.get(name), str):
            call[name] = delta[name]
    function = delta.get("function")
    if isinstance(function, dict):
        for name in ("name", "arguments"):
            if isinstance(function.get(name), str):
                call["function"][name] += function[name]
