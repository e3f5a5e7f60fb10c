"""A decision's fields as the audit trace and the analytics store lay them out.

Derived from the model (:class:`app.contract.decision.Decision`), so a field the
decision gains reaches the trace (app/audit/explain.py), the analytics rows and the
analytics store's table (app/analytics/rows.py, app/analytics/schema.py) with no
edit there:

* :data:`SHOWN`: the fields a trace shows in a place of its own (the one choice made
  here);
* :data:`CONTEXT`: every other field, in the model's order: the trace lists them as
  the decision's context, the store keeps them as its ``details`` JSON;
* :data:`COLUMNS`: the fields holding one value (text, number, flag or time: not a
  list or a model), with its type, but the event's type and schema version (the same
  on every decision): a column each in the store's ``decisions`` table.
"""

from __future__ import annotations

import types
from datetime import datetime
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin

from app.contract import Decision

#: Decision fields the trace shows in their own place; any other field (selection
#: rule, domain, mode ... as the routing core adds them) is listed as context.
SHOWN = frozenset(
    {
        "id",
        "type",
        "schema_version",
        "occurred_at",
        "request_id",
        "attempt",
        "route",
        "deployment",
        "provider",
        "model",
        "strategy",
        "algorithm_version",
        "candidates",
        "excluded",
        "config_hash",
        "state_version",
        "propensity",
        "prompt_sha256",
        "prompt_chars",
    }
)
CONTEXT = tuple(name for name in Decision.model_fields if name not in SHOWN)
_CONTEXT = set(CONTEXT)
#: Types a column holds as they are.
_SCALARS = (str, int, float, bool, datetime)


def context_of(decision: Decision) -> dict[str, Any]:
    """The decision's context fields as JSON values, in the model's order."""
    return decision.model_dump(mode="json", include=_CONTEXT)


def scalar_type(annotation: Any) -> type | None:
    """The type of a field holding one value (``X | None``: ``X``; a string enum or
    ``Literal`` of strings: ``str``), None for a list, a dict or a model."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return scalar_type(args[0]) if len(args) == 1 else None
    if get_origin(annotation) is Literal:
        return str if all(isinstance(arg, str) for arg in get_args(annotation)) else None
    if (
        isinstance(annotation, type)
        and issubclass(annotation, str)
        and issubclass(annotation, Enum)
    ):
        return str
    return annotation if annotation in _SCALARS else None


COLUMNS: dict[str, type] = {
    name: kind
    for name, info in Decision.model_fields.items()
    if name not in ("type", "schema_version") and (kind := scalar_type(info.annotation))
}
