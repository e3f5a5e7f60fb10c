"""Walking a dynamic route (:mod:`app.config.dynamic_routes`): pure and deterministic.

:func:`walk` follows a validated graph from its start for one request's
:class:`RequestFacts` and returns the :class:`Path` taken: each node with the exit
it left by (the decision trace) and the terminal, a model node or a refusal. It
reads no clock, no environment and does no I/O: rate and budget nodes ask the
caller's :class:`Counters` (the fold owns the counts), and a split hashes the
request's session id, else its prompt-cache key, else its request id, with SHA-256,
so a conversation takes the same branch on every worker, after every restart and
every reload that leaves the split's branches and salt unchanged.

Fallback models: the path's model node lists them; the fold forwards a request
to the next one after a provider failure (:func:`app.routing.dynamic.fall_back`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Generic, Protocol, TypeVar

from app.config.dynamic_routes import (
    SPLIT_BUCKETS,
    Branch,
    BudgetNode,
    ConditionNode,
    DynamicRoutes,
    GraphError,
    ModelNode,
    RateNode,
    RefuseNode,
    RouteGraph,
    SplitNode,
    When,
)
from app.config.schema import RoutingConfig
from app.contract.features import Features
from app.contract.request import ChatRequest
from app.understanding.domains import DOMAIN_ORDER

#: ``task_type`` of a request in no domain.
GENERAL_DOMAIN = "general"


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What a graph may test about a request: identifiers, labels and counts, no text."""

    request_id: str
    tenant: str | None = None
    #: The gateway key's id (never the key).
    api_key: str | None = None
    #: The request's ``model`` as sent (None: absent, matched as ``""``).
    model: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    session_id: str | None = None
    prompt_cache_key: str | None = None
    domain: str = GENERAL_DOMAIN
    has_tools: bool = False
    prompt_chars: int = 0

    @classmethod
    def of(
        cls,
        request: ChatRequest,
        features: Features | None,
        *,
        api_key: str | None = None,
        prompt_cache_key: str | None = None,
    ) -> RequestFacts:
        """A request's facts; without features, domain ``general`` and 0 characters."""
        return cls(
            request_id=request.request_id,
            tenant=request.tenant,
            api_key=api_key,
            model=request.model,
            metadata=dict(request.metadata),
            session_id=request.session_id,
            prompt_cache_key=prompt_cache_key,
            domain=features.task_type if features is not None else GENERAL_DOMAIN,
            has_tools=bool(request.tools),
            prompt_chars=features.prompt_chars if features is not None else 0,
        )


Spec = TypeVar("Spec", RateNode, BudgetNode)


@dataclass(frozen=True, slots=True)
class NodeCheck(Generic[Spec]):
    """A rate or budget node met by a request: what it counts is ``key``, ``subject``'s
    count at node ``node`` of graph ``graph``."""

    graph: str
    node: str
    spec: Spec
    subject: str | None

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.graph, self.node, self.subject)


@dataclass(frozen=True, slots=True)
class RateCheck(NodeCheck[RateNode]):
    """A rate node met by a request: count ``key`` against ``spec``'s limit. ``subject``:
    the tenant or API key id counted (None: the request has none; counted together)."""


@dataclass(frozen=True, slots=True)
class BudgetCheck(NodeCheck[BudgetNode]):
    """A budget node met by a request: compare ``key``'s spend with ``spec.usd``.
    ``subject``: the tenant, API key id or route (the graph's name) whose spend counts."""


class Counters(Protocol):
    """The caller's counts, as of the request's position in the log."""

    def rate_within(self, check: RateCheck) -> bool: ...

    def budget_within(self, check: BudgetCheck) -> bool: ...


@dataclass(frozen=True, slots=True)
class Step:
    """One node passed: the exit taken and the node it leads to."""

    node: str
    kind: str
    exit: str
    to: str
    #: For a split: ``<key kind> bucket <n>/10000`` (never the key's value).
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Path:
    graph: str
    steps: tuple[Step, ...]
    #: The terminal node's id.
    end: str
    terminal: ModelNode | RefuseNode

    @property
    def model(self) -> ModelNode | None:
        return self.terminal if isinstance(self.terminal, ModelNode) else None

    @property
    def refusal(self) -> RefuseNode | None:
        return self.terminal if isinstance(self.terminal, RefuseNode) else None

    def trace(self) -> dict[str, Any]:
        """The path as JSON data for a decision's trace."""
        steps = [
            {"node": s.node, "kind": s.kind, "exit": s.exit, "to": s.to}
            | ({"detail": s.detail} if s.detail is not None else {})
            for s in self.steps
        ]
        terminal = self.terminal.model_dump(mode="json", exclude_none=True)
        return {"graph": self.graph, "steps": steps, "end": self.end, "terminal": terminal}


def walk(graph: RouteGraph, facts: RequestFacts, counters: Counters) -> Path:
    """The path ``facts`` take through ``graph`` (validated: acyclic, exits known)."""
    steps: list[Step] = []
    node_id = graph.start
    while len(steps) <= len(graph.nodes):
        node = graph.nodes[node_id]
        if isinstance(node, ModelNode | RefuseNode):
            return Path(graph=graph.name, steps=tuple(steps), end=node_id, terminal=node)
        step = _leave(graph.name, node_id, node, facts, counters)
        steps.append(step)
        node_id = step.to
    raise GraphError(f"{graph.name}: walk from {graph.start!r} does not end (unvalidated graph)")


def _leave(
    graph: str,
    node_id: str,
    node: ConditionNode | SplitNode | RateNode | BudgetNode,
    facts: RequestFacts,
    counters: Counters,
) -> Step:
    if isinstance(node, ConditionNode):
        exit_name = "true" if holds(node.when, facts) else "false"
        return Step(node_id, node.kind, exit_name, node.exits()[exit_name])
    if isinstance(node, SplitNode):
        key_kind, key = split_key(facts)
        bucket = split_bucket(node.salt or node_id, key)
        branch = branch_at(node, bucket)
        detail = f"{key_kind} bucket {bucket}/{SPLIT_BUCKETS}"
        return Step(node_id, node.kind, branch.label, branch.to, detail)
    if isinstance(node, RateNode):
        subject = facts.tenant if node.per == "tenant" else facts.api_key
        within = counters.rate_within(RateCheck(graph, node_id, node, subject))
    else:
        payer = _payer(graph, node, facts)
        within = counters.budget_within(BudgetCheck(graph, node_id, node, payer))
    exit_name = "within" if within else "exceeded"
    return Step(node_id, node.kind, exit_name, node.exits()[exit_name])


def _payer(graph: str, node: BudgetNode, facts: RequestFacts) -> str | None:
    if node.per == "tenant":
        return facts.tenant
    return facts.api_key if node.per == "api_key" else graph


def holds(when: When, facts: RequestFacts) -> bool:
    """Whether every test ``when`` sets holds for ``facts``."""
    chars = when.prompt_chars
    tests = (
        when.tenant is None or facts.tenant in when.tenant,
        when.api_key is None or facts.api_key in when.api_key,
        when.model is None or any(fnmatchcase(facts.model or "", p) for p in when.model),
        when.domain is None or facts.domain in when.domain,
        when.has_tools is None or facts.has_tools == when.has_tools,
        chars is None or chars.at_least is None or facts.prompt_chars >= chars.at_least,
        chars is None or chars.below is None or facts.prompt_chars < chars.below,
    )
    return all(tests) and _metadata_holds(when.metadata, facts.metadata)


def _metadata_holds(wanted: Mapping[str, list[str]] | None, metadata: Mapping[str, str]) -> bool:
    if wanted is None:
        return True
    return all(
        key in metadata and any(fnmatchcase(metadata[key], p) for p in patterns)
        for key, patterns in wanted.items()
    )


def split_key(facts: RequestFacts) -> tuple[str, str]:
    """What a split hashes: the session id, else the prompt-cache key, else the request id."""
    if facts.session_id:
        return "session_id", facts.session_id
    if facts.prompt_cache_key:
        return "prompt_cache_key", facts.prompt_cache_key
    return "request_id", facts.request_id


def split_bucket(salt: str, key: str) -> int:
    """A bucket in [0, 10 000) from SHA-256 of ``salt`` and ``key``: the same on every
    process and platform (Python's ``hash()`` is salted per process)."""
    digest = hashlib.sha256(f"{salt}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % SPLIT_BUCKETS


def branch_at(node: SplitNode, bucket: int) -> Branch:
    """The branch whose range holds ``bucket``: branches take consecutive ranges in
    their listed order, each as wide as its percentage."""
    upper = 0
    for branch in node.branches:
        upper += branch.buckets
        if bucket < upper:
            return branch
    return node.branches[-1]


def check_against(routes: DynamicRoutes, config: RoutingConfig) -> None:
    """GraphError unless ``routes`` name only the config's routes, ``provider:model``
    ids, providers and domains."""
    routes.check_references(
        targets={*config.route_names(), *config.deployment_ids()},
        providers={p.id for p in config.providers},
        domains={*DOMAIN_ORDER, GENERAL_DOMAIN},
    )
