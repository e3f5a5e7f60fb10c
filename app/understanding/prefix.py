"""The prompt prefix a provider's prompt cache holds, as a hash (for cache affinity).

A conversation's turns share their beginning: the tools, the system prompt and the
first user message come back unchanged at every turn, and that is what a provider
caches. :func:`prefix_sha256` hashes exactly that beginning — the tools and the
messages up to and including the first user message (every message when there is
none), role by role — cut at :data:`PREFIX_CHARS` characters, so a long document
with different questions after it shares one prefix too. The hash is the
``context`` cache affinity pins; no text leaves this function.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from app.understanding.text import part_text

if TYPE_CHECKING:
    from app.contract import ChatRequest

#: Characters of the canonical prefix hashed (about 2,000 tokens: past every
#: provider's minimum cacheable prefix, 1,024 tokens).
PREFIX_CHARS = 8192
_RECORD, _UNIT = "\x1e", "\x1f"


def _message_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part_text(part) for part in content if isinstance(part, dict))
    return ""


def prefix_text(request: ChatRequest) -> str:
    """The canonical beginning of the prompt (internal: never stored or sent)."""
    chunks: list[str] = []
    if request.tools:
        chunks.append(json.dumps(request.tools, sort_keys=True, separators=(",", ":")))
    size = sum(len(c) for c in chunks)
    for message in request.messages:
        chunk = f"{message.role}{_UNIT}{_message_text(message.content)}"
        chunks.append(chunk)
        size += len(chunk) + 1
        if message.role == "user" or size >= PREFIX_CHARS:
            break
    return _RECORD.join(chunks)[:PREFIX_CHARS]


def prefix_sha256(request: ChatRequest) -> str:
    return hashlib.sha256(prefix_text(request).encode()).hexdigest()
