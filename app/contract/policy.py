"""Policy as events: a proposed policy, and the change every route folds.

A policy is the providers file plus the routing parameters, as a
:class:`PolicyDocument` with no secret in it: an ``api_key`` travels as the
``${VARIABLE}`` it names (each worker resolves it from its own environment) or
not at all (a literal key stays in the file of the worker that has it), and the
gateway's key hashes stay in the gateway's file.

``policy.proposed`` records go to the one-partition policy topic, whose order
numbers the versions; the relay (agents/policy.py) copies each new version onto
the routing log as one ``policy.changed`` per route, so a route switches policy
at one position of its log, on every worker, in replay too.
"""

from __future__ import annotations

from typing import Any, Literal

from app.contract.base import Envelope, Frozen

PolicySource = Literal["start", "apply", "sighup", "rollback"]


class PolicyDocument(Frozen):
    """What a decision depends on: the providers file's routing part and the parameters."""

    #: The providers file as parsed YAML, ``${VARIABLE}`` references unresolved, without
    #: literal API keys and gateway keys.
    config: dict[str, Any]
    #: The routing parameters (app/routing/params.py ``RoutingParams``), by environment
    #: name: every one (a document written by an older version may lack some: their
    #: defaults, never an environment, fill them in).
    params: dict[str, Any]


class PolicyProposed(Envelope):
    """A policy someone asked for, on the policy topic. Its version is its rank among the
    proposals that changed something (one equal to the version in force is no version)."""

    type: Literal["policy.proposed"] = "policy.proposed"
    #: ``app.policy.document_hash`` of ``document``.
    hash: str
    document: PolicyDocument
    source: PolicySource
    #: For a rollback: the version whose document this is.
    rollback_of: int | None = None


class PolicyChanged(Envelope):
    """On the routing log, keyed by route: from this position on, ``version`` is in force
    on ``route``. Folded once (a copy at or below the route's version changes nothing)."""

    type: Literal["policy.changed"] = "policy.changed"
    route: str
    version: int
    hash: str
    document: PolicyDocument
    source: PolicySource
