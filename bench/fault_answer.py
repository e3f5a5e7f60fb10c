"""The answers of the fault provider (bench/fault_provider.py), pure: the canonical text a
request's messages determine, its JSON body and stream chunks, and OpenAI error bodies.

The bench computes the same :func:`canonical_text` to check what a client received.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

#: Tokens in a healthy answer, and where the faulty streams break.
TOKENS = 60
BREAK_AT = 40
CREATED = 1_700_000_000
_WORD_LIST = (
    "amber basil cedar delta ember fjord garnet harbor iris juniper kelp lumen maple "
    "nectar onyx pepper quartz raven sorrel tundra umber violet willow xenon yarrow "
    "zephyr acorn birch cobalt dune elm flint grove heron indigo jade kestrel lark moss "
    "nickel opal pine quill reed slate thistle umbra vale wren yew zinc alder brook "
    "clover dusk fern glade hazel isle jasper knoll loam mist"
)
_WORDS = _WORD_LIST.split()


# --------------------------------------------------------------------------- the answer


def _text_of(content: object) -> str:
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def request_key(messages: list[dict[str, Any]]) -> str:
    """A request's identity: a digest of its messages (roles and contents)."""
    pairs = [[str(m.get("role")), _text_of(m.get("content"))] for m in messages]
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]


def canonical_tokens(messages: list[dict[str, Any]]) -> list[str]:
    """The 60 tokens of the healthy answer: words chosen by a digest of the messages,
    each but the first with its leading space (so the tokens join into the text)."""
    digest = hashlib.sha256(request_key(messages).encode()).digest()
    words = [_WORDS[(digest[i % len(digest)] + 7 * i) % len(_WORDS)] for i in range(TOKENS)]
    return [w if i == 0 else f" {w}" for i, w in enumerate(words)]


def canonical_text(messages: list[dict[str, Any]]) -> str:
    return "".join(canonical_tokens(messages))


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(len(_text_of(m.get("content")).split()) + 1 for m in messages)


def usage_of(messages: list[dict[str, Any]]) -> dict[str, int]:
    tokens_in = prompt_tokens(messages)
    return {
        "prompt_tokens": tokens_in,
        "completion_tokens": TOKENS,
        "total_tokens": tokens_in + TOKENS,
    }


def completion_body(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    message = {"role": "assistant", "content": canonical_text(messages)}
    return {
        "id": f"chatcmpl-{request_key(messages)}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage_of(messages),
    }


def chunk(model: str, key: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {
        "id": f"chatcmpl-{key}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": [choice],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


def usage_chunk(model: str, key: str, messages: list[dict[str, Any]]) -> bytes:
    chunk = {
        "id": f"chatcmpl-{key}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": [],
        "usage": usage_of(messages),
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


DONE = b"data: [DONE]\n\n"
MALFORMED = b"data: {this is not json\n\n"


def error_body(message: str, kind: str, code: str | None, param: str | None = None) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": param, "code": code}}
    ).encode()
