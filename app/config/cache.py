"""A route's response cache (``routes.NAME.cache``): exact, and optionally semantic.

Read by ingest (which computes a request's keys, and its embedding when the cache is
semantic) and by the fold (which answers from, and fills, the route's entries); loads
nothing. docs/policy.md, "Response cache"; docs/routing.md, "Response cache".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: The most entries a route may keep: each is in the route's row (about 130 bytes, 510
#: with a semantic vector), written with every batch of the route's events.
MAX_CACHE_ENTRIES = 1024


class SemanticCache(BaseModel):
    """Paraphrases of a cached question (same conversation before it, same parameters)
    answered from the cache when the cosine similarity of the two last user messages'
    embeddings reaches ``threshold``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = Field(ge=0.5, le=1.0)


class CacheConfig(BaseModel):
    """Exact-match response cache of a route (opt-in: absent, the route caches nothing).

    A request is cached only with ``temperature: 0`` or ``routing.cache: true`` (and not
    with ``routing.cache: false``). An entry lives ``ttl_s`` seconds of the route's event
    clock; a route keeps at most ``max_entries`` (the oldest goes first)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``false`` turns the cache off (no hits, no new entries; the entries are dropped).
    enabled: bool = True
    ttl_s: float = Field(default=3600.0, gt=0.0, le=30 * 86_400.0)
    max_entries: int = Field(default=256, ge=1, le=MAX_CACHE_ENTRIES)
    semantic: SemanticCache | None = None
