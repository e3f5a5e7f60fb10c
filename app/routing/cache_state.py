"""The route's response cache as the route state holds it (app/routing/cache.py folds it):
its entries, the requests being answered from it within a step, and what an open
attempt's answer will be cached under. Rows: app/routing/rows.py, written inline in the
route's row.
"""

from __future__ import annotations

from dataclasses import field

from app.routing.records import record


@record
class CacheRef:
    """What an attempt's successful answer is cached under (app/routing/cache.py): the
    request's cache key and scope (with its dynamic route's target, when it has one),
    and its last user message's quantised embedding on a semantic route."""

    key: str
    scope: str
    vector: str = ""
    embedder: str = ""


@record
class CacheEntry:
    """A cached answer, by reference: the request that got it and the routing-log
    position of its ``attempt.finished`` (the completion stays in the log)."""

    request_id: str
    position: int
    #: Route-clock time it was folded (its ``ttl_s`` runs from there).
    stored_at: float
    deployment: str
    #: What the answer cost (what each hit saves).
    cost_usd: float
    scope: str
    #: Semantic: the quantised embedding (base64) and its squared norm.
    vector: str = ""
    embedder: str = ""
    norm2: int = 0


@record
class Serving:
    """A request answered from the cache within the step that found the hit: the driver
    recalls ``position`` (the source's answer) before the step ends, so no written row
    holds one."""

    source: str
    position: int


@record
class ResponseCache:
    """The route's response cache (app/routing/cache.py)."""

    #: Entries by key, oldest first; bounded by the route's ``cache.max_entries``.
    entries: dict[str, CacheEntry] = field(default_factory=dict)
    #: Requests being answered from the cache, by request id, within one step.
    serving: dict[str, Serving] = field(default_factory=dict)
