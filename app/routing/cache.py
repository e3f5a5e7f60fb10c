"""The response cache, as routing decisions (docs/routing.md, "Response cache").

A route whose policy has ``cache`` answers a request from an earlier request's answer
when they ask the same question (the same ``CacheKey.key``, computed at ingest), or,
when the cache is semantic, a paraphrase of it (the same ``scope`` and a cosine
similarity of their last user messages' embeddings at or above the threshold). The hit
is a decision (``selection_rule: "cache"``, a :class:`~app.contract.CacheTrace` naming
the source, cost 0, no dispatch: no provider is called), and the answer is the source's
completion, delivered as this request's response.

The state holds references, never text: an entry is the source's request id and the
routing-log position of its ``attempt.finished`` (which carries the completion). A hit
puts a :class:`~app.routing.cache_state.Serving` in the state; :func:`app.routing.fold.wanted`
then asks the driver for the event at that position (from memory, or read back from the
routing topic, as a parked attempt's carrier is), and :func:`answer` builds the
response from it, in the same step. Replay folds the same events, finds the same entry
and recalls the same record: it reproduces the hit and its response exactly.

Entries expire ``ttl_s`` after their answer on the route's event clock, and a route
keeps at most ``max_entries`` (the oldest go first). A policy without the route's cache
(or with ``enabled: false``) answers nothing from it, stores nothing and drops what it
held at the route's next request.

Similarity is integer arithmetic on the recorded int8 vectors (the dot product, compared
with the threshold in fixed point), so it is the same on every machine, live and in
replay; the reported similarity is rounded to four decimals.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Literal

from app.config.cache import CacheConfig
from app.contract import (
    AttemptFinished,
    CacheTrace,
    Decision,
    RequestAccepted,
    Response,
    RoutingLogEvent,
    derived_id,
)
from app.routing.answers import answers, at
from app.routing.attempts import first_attempt
from app.routing.cache_state import CacheEntry, CacheRef, ResponseCache, Serving
from app.routing.policy import Policy
from app.routing.records import trusted
from app.routing.state import RouteState, evolve_route
from app.routing.steps import Step

#: The ``algorithm_version`` of a decision answered from the cache.
ALGORITHM = "switchyard-cache/1"
#: Thresholds are compared in units of 1/10,000.
_SCALE = 10_000


@dataclass(frozen=True, slots=True)
class Found:
    entry: CacheEntry
    kind: Literal["exact", "semantic"]
    similarity: float
    threshold: float | None


def config_of(policy: Policy, route: str) -> CacheConfig | None:
    """The route's cache, when it has one that is on."""
    configured = policy.config.routes.get(route)
    cache = configured.cache if configured is not None else None
    return cache if cache is not None and cache.enabled else None


def ref_of(accepted: RequestAccepted, policy: Policy) -> CacheRef | None:
    """Where an attempt of this request stores its answer (None: it is not cached)."""
    key = accepted.cache
    if key is None or accepted.answered_prefix is not None:
        return None
    if config_of(policy, accepted.route) is None:
        return None
    # A dynamic route's request is answered by its target: entries of another target
    # (another model) never answer it.
    variant = "" if accepted.dynamic is None else f"@{accepted.dynamic.target}"
    return CacheRef(key.key + variant, key.scope + variant, key.vector or "", key.embedder or "")


def lookup(
    state: RouteState, accepted: RequestAccepted, policy: Policy
) -> tuple[RouteState, Found | None]:
    """The entry that answers ``accepted`` (None: a miss); the state without what expired,
    or without any entry when the route's cache is off."""
    config = config_of(policy, accepted.route)
    if config is None:
        if state.cache.entries:
            state = evolve_route(state, cache=ResponseCache({}, state.cache.serving))
        return state, None
    state = _fresh(state, config)
    ref = ref_of(accepted, policy)
    if ref is None or not state.cache.entries:
        return state, None
    entry = state.cache.entries.get(ref.key)
    if entry is not None:
        return state, Found(entry, "exact", 1.0, None)
    if config.semantic is None or not ref.vector:
        return state, None
    return state, _nearest(state, ref, config.semantic.threshold)


def hit(state: RouteState, accepted: RequestAccepted, found: Found, policy: Policy) -> Step:
    """Answer ``accepted`` from ``found``: the decision now, the response once the driver
    recalled the source's answer (:func:`answer`)."""
    request_id = accepted.request.request_id
    entry = found.entry
    provider, _, model = entry.deployment.partition(":")
    trace = CacheTrace(
        kind=found.kind,
        source_request_id=entry.request_id,
        source_position=entry.position,
        similarity=found.similarity,
        threshold=found.threshold,
        age_s=round(max(0.0, state.clock - entry.stored_at), 3),
        saved_usd=entry.cost_usd,
    )
    attempt = first_attempt(accepted)
    decision = trusted(Decision)(
        id=derived_id("decision", request_id, attempt),
        occurred_at=at(state.clock),
        request_id=request_id,
        attempt=attempt,
        route=accepted.route,
        deployment=entry.deployment,
        provider=provider,
        model=model,
        strategy=policy.params.strategy.value,
        algorithm_version=ALGORITHM,
        candidates=[],
        excluded=[],
        config_hash=policy.config_hash,
        policy_version=policy.version,
        dynamic=accepted.dynamic,
        state_version=state.position,
        propensity=1.0,
        selection_rule="cache",
        cache=trace,
        prompt_sha256=accepted.prompt_sha256,
        prompt_chars=accepted.prompt_chars,
    )
    cached = state.cache
    serving = {**cached.serving, request_id: Serving(entry.request_id, entry.position)}
    return Step(
        evolve_route(state, cache=ResponseCache(cached.entries, serving)), decisions=[decision]
    )


def answer(state: RouteState, request_id: str, position: int, event: RoutingLogEvent) -> Step:
    """The response of a request served from the cache: the source's completion, recalled
    from ``position`` of the log."""
    cached = state.cache
    serving = cached.serving[request_id]
    if (
        position != serving.position
        or not isinstance(event, AttemptFinished)
        or event.outcome.request_id != serving.source
        or not answers(event)
        or event.completion is None
    ):
        raise ValueError(f"the event at {serving.position} is not {serving.source}'s answer")
    response = trusted(Response)(
        id=derived_id("response", request_id),
        occurred_at=at(state.clock),
        request_id=request_id,
        status="ok",
        attempts=0,
        deployment=event.outcome.deployment,
        completion=dict(event.completion),
    )
    left = {k: v for k, v in cached.serving.items() if k != request_id}
    return Step(
        evolve_route(state, cache=ResponseCache(cached.entries, left)), responses=[response]
    )


def store(
    state: RouteState, ref: CacheRef | None, event: AttemptFinished, position: int, policy: Policy
) -> RouteState:
    """A successful final answer, folded at ``position``: an entry under its request's key
    (the newest answer replaces an older one of the same question)."""
    config = config_of(policy, event.outcome.route)
    if ref is None or config is None or not answers(event):
        return state
    outcome = event.outcome
    entry = CacheEntry(
        outcome.request_id,
        position,
        state.clock,
        outcome.deployment,
        outcome.cost_usd,
        ref.scope,
        ref.vector,
        ref.embedder,
        _norm2(ref.vector) if ref.vector else 0,
    )
    cached = state.cache
    entries = {k: v for k, v in cached.entries.items() if k != ref.key}
    entries[ref.key] = entry
    return _fresh(evolve_route(state, cache=ResponseCache(entries, cached.serving)), config)


def _fresh(state: RouteState, config: CacheConfig) -> RouteState:
    """Without the entries past their ``ttl_s`` and the oldest beyond ``max_entries``
    (entries are in the order they were folded, so both are at the front)."""
    entries = state.cache.entries
    if not entries:
        return state
    cutoff = state.clock - config.ttl_s
    drop = max(0, len(entries) - config.max_entries)
    keys = iter(entries)
    gone = []
    for key in keys:
        if drop <= 0 and entries[key].stored_at > cutoff:
            break
        gone.append(key)
        drop -= 1
    if not gone:
        return state
    kept = dict(entries)
    for key in gone:
        del kept[key]
    return evolve_route(state, cache=ResponseCache(kept, state.cache.serving))


def _vector(text: str) -> bytes:
    return base64.b64decode(text)


def _signed(raw: bytes) -> list[int]:
    return [b - 256 if b > 127 else b for b in raw]


def _norm2(text: str) -> int:
    return sum(v * v for v in _signed(_vector(text)))


def _dots(query: bytes, vectors: list[bytes]) -> list[int]:
    """The integer dot products of ``query`` with each vector (int8 components): exact,
    so numpy's and Python's agree to the bit."""
    try:
        import numpy as np
    except ImportError:  # the same integers, slower
        return _dots_python(query, vectors)
    matrix = np.frombuffer(b"".join(vectors), dtype=np.int8).reshape(len(vectors), len(query))
    column = np.frombuffer(query, dtype=np.int8).astype(np.int64)
    return [int(d) for d in matrix.astype(np.int64) @ column]


def _dots_python(query: bytes, vectors: list[bytes]) -> list[int]:
    q = _signed(query)
    return [sum(a * b for a, b in zip(q, _signed(v), strict=True)) for v in vectors]


def _nearest(state: RouteState, ref: CacheRef, threshold: float) -> Found | None:
    """The most similar entry of the same scope and embedder at or above ``threshold``
    (the oldest of equals), compared exactly: ``dot/sqrt(n_q n_e) >= t`` as
    ``dot^2 * S^2 >= (tS)^2 * n_q * n_e`` in integers."""
    candidates = [
        e
        for e in state.cache.entries.values()
        if e.vector and e.scope == ref.scope and e.embedder == ref.embedder
    ]
    if not candidates:
        return None
    query = _vector(ref.vector)
    vectors = [_vector(e.vector) for e in candidates]
    if any(len(v) != len(query) for v in vectors):
        candidates = [e for e, v in zip(candidates, vectors, strict=True) if len(v) == len(query)]
        vectors = [v for v in vectors if len(v) == len(query)]
    if not candidates:
        return None
    norm_q = _norm2(ref.vector)
    limit = round(threshold * _SCALE)
    best: tuple[int, CacheEntry] | None = None
    for entry, dot in zip(candidates, _dots(query, vectors), strict=True):
        if dot <= 0 or norm_q == 0 or entry.norm2 == 0:
            continue
        if dot * dot * _SCALE * _SCALE < limit * limit * norm_q * entry.norm2:
            continue
        # Better than the best so far: dot/sqrt(n_e) larger (n_q is common), exactly.
        if best is None or dot * dot * best[1].norm2 > best[0] * best[0] * entry.norm2:
            best = (dot, entry)
    if best is None:
        return None
    dot, entry = best
    similarity = round(min(1.0, dot / math.sqrt(norm_q * entry.norm2)), 4)
    return Found(entry, "semantic", similarity, threshold)
