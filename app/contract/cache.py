"""The response cache as events carry it: a request's keys, and a hit's trace.

Hashes, a quantised vector and log positions only, never text: the answer a hit serves
stays in the routing log, in the source request's ``attempt.finished``, and is read back
from there by position (docs/routing.md, "Response cache").
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.contract.base import Frozen


class CacheKey(Frozen):
    """What ingest computed for a request its route may answer from the cache.

    Set only on a request the cache may serve: a chat request with ``temperature: 0``
    or ``routing.cache: true`` (not ``false``), on a route whose policy has a ``cache``.
    """

    #: SHA-256 (hex, 128 bits) of everything that makes two requests the same question:
    #: route, model asked, messages, tools, tool_choice, response_format, sampling
    #: parameters, stop sequences, tenant, provider preferences and preset.
    key: str
    #: The same without the last message: two requests whose keys differ only in their
    #: last user message share it (the semantic cache compares only those).
    scope: str
    #: The last user message's embedding, quantised to int8 and base64-encoded, when the
    #: route's cache is semantic (``embedder`` names the model); no text.
    vector: str | None = None
    embedder: str | None = None


class CacheTrace(Frozen):
    """A decision answered from the cache: whose answer, how close, what it saved."""

    kind: Literal["exact", "semantic"]
    #: The request whose answer is served, and the routing-log offset of its
    #: ``attempt.finished`` (the completion), on this route's partition.
    source_request_id: str
    source_position: int
    #: Semantic: the cosine similarity of the two last user messages (4 decimals) and
    #: the route's threshold; exact: 1.0 and None.
    similarity: float
    threshold: float | None = None
    #: Seconds since the source's answer was folded (route clock).
    age_s: float = Field(ge=0.0)
    #: What this answer cost (nothing: no provider is called) and what the source's cost.
    cost_usd: float = 0.0
    saved_usd: float = Field(default=0.0, ge=0.0)
