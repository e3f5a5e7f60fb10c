"""A request's context for learning: the buckets its statistics are kept in.

Ingest's features give each request a key ``tenant|domain|length|code`` (the
detected domain or ``general``, the length bucket, ``1`` when the text contains
code syntax; ``-`` for no tenant). Statistics are kept at four levels, finest
first, and an estimate falls back to a coarser one until the finer has enough
evidence (:mod:`app.routing.estimates`)::

    acme|math|short|0   ->   *|math|short|0   ->   *|math|*|*   ->   *

A request without features (none were computed) has only ``*``. The key is a
pure function of the accepted request, so a replay finds the same buckets.
"""

from __future__ import annotations

from app.contract import RequestAccepted

#: The level every request shares (the deployment's overall statistics).
EVERYTHING = "*"
#: Per-tenant spend of a tenant with a cost target (app/routing/pacer.py).
TENANT_PREFIX = "tenant:"
NO_TENANT = "-"


def context_key(accepted: RequestAccepted) -> str | None:
    """``tenant|domain|length|code`` of the request, None without features."""
    features = accepted.features
    if features is None:
        return None
    tenant = _clean(accepted.request.tenant) if accepted.request.tenant else NO_TENANT
    code = "1" if features.has_code else "0"
    return f"{tenant}|{_clean(features.task_type)}|{features.length_bucket}|{code}"


def _clean(text: str) -> str:
    """No separator inside a part, and a bounded length (keys live in state rows)."""
    return text.replace("|", "_")[:64]


def levels(key: str | None) -> tuple[str, ...]:
    """The buckets of a context key, finest first, ending with ``*`` (a request without a
    tenant starts at its ``*|...`` bucket)."""
    if not key:
        return (EVERYTHING,)
    parts = key.split("|")
    if len(parts) != 4:
        return (EVERYTHING,)
    tenant, domain, length, code = parts
    chain = [f"*|{domain}|{length}|{code}", f"*|{domain}|*|*", EVERYTHING]
    if tenant not in {NO_TENANT, "*"}:
        chain.insert(0, key)
    return tuple(dict.fromkeys(chain))


def tenant_of(key: str | None) -> str | None:
    if not key:
        return None
    tenant = key.split("|", 1)[0]
    return None if tenant in {NO_TENANT, "*"} else tenant


def tenant_scope(tenant: str) -> str:
    return f"{TENANT_PREFIX}{tenant}"


def level_index(chain: tuple[str, ...], key: str) -> int:
    """How coarse ``key`` is in ``chain``: 0 the finest."""
    return chain.index(key) if key in chain else len(chain) - 1
