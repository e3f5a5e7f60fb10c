"""Dynamic routes: the ``dynamic_routes:`` section of ``providers.yaml``.

A dynamic route is a graph of named nodes walked from its ``start`` for the requests of
the tenants and API keys it is bound to (``bind``): ``condition`` (exits ``true`` /
``false``), ``split`` (percentage branches, by a SHA-256 bucket of the session id, else
the prompt-cache key, else the request id), ``rate`` and ``budget`` (exits ``within`` /
``exceeded``), and the terminals ``model`` (a route or ``provider:model``, a mode,
provider lists, up to eight fallback models) and ``refuse``. Every check runs at load,
one error naming the node; those needing the config's names are
:meth:`DynamicRoutes.check_references`. No other ``app`` module is imported but the
modes, so ``app.config.schema`` may embed :class:`DynamicRoutes`. The walk is
:mod:`app.routing.graph`; the format, docs/dynamic-routes.md.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, model_validator

from app.contract.mode import RoutingMode

#: A model node names at most eight fallback models.
MAX_FALLBACK_MODELS = 8
#: Split buckets: percentages are kept to 0.01 %, so 10 000 buckets.
SPLIT_BUCKETS = 10_000
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

NodeId = Annotated[str, Field(pattern=_NAME, max_length=100)]


class GraphError(ValueError):
    """A ``dynamic_routes`` section is malformed; the message names the graph and node."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _as_list(value: Any) -> Any:
    """A single string where a list is expected is a one-item list."""
    return [value] if isinstance(value, str) else value


class CharsRange(_Frozen):
    """``at_least <= prompt_chars < below``; either bound may be absent, not both."""

    at_least: int | None = Field(default=None, ge=0)
    below: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _bounded(self) -> CharsRange:
        if self.at_least is None and self.below is None:
            raise ValueError("prompt_chars needs 'at_least' or 'below'")
        if self.at_least is not None and self.below is not None and self.at_least >= self.below:
            raise ValueError("prompt_chars: 'at_least' must be below 'below'")
        return self


class When(_Frozen):
    """What a condition tests: every field set must hold (AND); a list means any of it."""

    tenant: list[str] | None = None
    api_key: list[str] | None = None
    #: Metadata key → glob patterns of its value (``"*"``: the key is present).
    metadata: dict[str, list[str]] | None = None
    #: Glob patterns (``fnmatch``, case-sensitive) of the request's ``model``.
    model: list[str] | None = None
    #: Detected domains (features' ``task_type``: ``coding``, ``math`` …, ``general``).
    domain: list[str] | None = None
    has_tools: bool | None = None
    prompt_chars: CharsRange | None = None

    @model_validator(mode="before")
    @classmethod
    def _lists(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = {k: _as_list(v) for k, v in data.items()}
        if isinstance(out.get("metadata"), dict):
            out["metadata"] = {k: _as_list(v) for k, v in out["metadata"].items()}
        return out

    @model_validator(mode="after")
    def _tests_something(self) -> When:
        if all(getattr(self, field) is None for field in type(self).model_fields):
            raise ValueError("a condition must test at least one field")
        return self


class ConditionNode(_Frozen):
    kind: Literal["condition"]
    when: When
    true: NodeId
    false: NodeId

    @model_validator(mode="before")
    @classmethod
    def _yaml_booleans(cls, data: Any) -> Any:
        """YAML reads the keys ``true:`` and ``false:`` as booleans: name them back."""
        if not isinstance(data, dict):
            return data
        names = {True: "true", False: "false"}
        return {names.get(k, k) if isinstance(k, bool) else k: v for k, v in data.items()}

    def exits(self) -> dict[str, str]:
        return {"true": self.true, "false": self.false}


class Branch(_Frozen):
    #: Share of traffic in percent, to 0.01 (``0`` is allowed: a rollout not yet begun).
    percent: float = Field(ge=0.0, le=100.0)
    to: NodeId
    #: The exit's name in the trace (default: the target node's id).
    name: str | None = Field(default=None, pattern=_NAME, max_length=100)

    @property
    def buckets(self) -> int:
        return round(self.percent * SPLIT_BUCKETS / 100)

    @property
    def label(self) -> str:
        return self.name or self.to


class SplitNode(_Frozen):
    kind: Literal["split"]
    branches: list[Branch] = Field(min_length=2)
    #: Mixed into the hash (default: the node's id). Change it to reshuffle on purpose.
    salt: str | None = Field(default=None, max_length=100)

    @model_validator(mode="after")
    def _percentages(self) -> SplitNode:
        for branch in self.branches:
            if not math.isclose(branch.buckets, branch.percent * SPLIT_BUCKETS / 100):
                raise ValueError(f"split percent {branch.percent} has more than 2 decimals")
        total = sum(b.buckets for b in self.branches)
        if total != SPLIT_BUCKETS:
            raise ValueError(f"split percentages sum to {total / 100:g}, not 100")
        labels = [b.label for b in self.branches]
        if len(set(labels)) != len(labels):
            raise ValueError("two split branches share an exit name: give them distinct 'name's")
        return self

    def exits(self) -> dict[str, str]:
        return {b.label: b.to for b in self.branches}


class _Gate(_Frozen):
    within: NodeId
    exceeded: NodeId

    def exits(self) -> dict[str, str]:
        return {"within": self.within, "exceeded": self.exceeded}


class RateNode(_Gate):
    """At most ``requests`` per ``window_s`` seconds for each tenant (or API key)."""

    kind: Literal["rate"]
    requests: int = Field(ge=1)
    window_s: float = Field(gt=0.0)
    per: Literal["tenant", "api_key"] = "tenant"


class BudgetNode(_Gate):
    """At most ``usd`` of spend per calendar ``period`` (UTC) for each tenant, API key,
    or for this route as a whole."""

    kind: Literal["budget"]
    usd: float = Field(gt=0.0)
    period: Literal["day", "week", "month"]
    per: Literal["tenant", "api_key", "route"] = "tenant"


class Preferences(_Frozen):
    """Provider lists for the chosen model (as a request's ``provider``)."""

    only: list[str] | None = None
    ignore: list[str] = Field(default_factory=list)
    order: list[str] = Field(default_factory=list)

    def providers(self) -> list[str]:
        return [*(self.only or ()), *self.ignore, *self.order]


class _Terminal(_Frozen):
    def exits(self) -> dict[str, str]:
        return {}


class ModelNode(_Terminal):
    """Terminal: route the request to ``target`` (a route, or a ``provider:model``)."""

    kind: Literal["model"]
    target: str = Field(min_length=1)
    mode: RoutingMode | None = None
    provider: Preferences | None = None
    #: Tried in order, each only after a retriable failure (429, 500, 502, 503, 504).
    fallback_models: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _fallbacks(self) -> ModelNode:
        count = len(self.fallback_models)
        if count > MAX_FALLBACK_MODELS:
            raise ValueError(f"{count} fallback models, at most {MAX_FALLBACK_MODELS}")
        models = [self.target, *self.fallback_models]
        for i, model in enumerate(models[1:], start=1):
            if model in models[:i]:
                raise ValueError(f"fallback model {model!r} repeats the target or a fallback")
        return self


class RefuseNode(_Terminal):
    """Terminal: answer with an error, no provider called."""

    kind: Literal["refuse"]
    code: str = Field(default="route_refused", pattern=r"^[a-z][a-z0-9_]*$", max_length=64)
    status: int = Field(default=403, ge=400, le=599)
    #: A fixed message for the client (configured text, never request content).
    message: str | None = Field(default=None, max_length=300)


Node = Annotated[
    ConditionNode | SplitNode | RateNode | BudgetNode | ModelNode | RefuseNode,
    Field(discriminator="kind"),
]


class Binding(_Frozen):
    """One tenant or one API key id whose requests walk the graph."""

    tenant: str | None = Field(default=None, min_length=1)
    api_key: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> Binding:
        if (self.tenant is None) == (self.api_key is None):
            raise ValueError("a binding names exactly one of 'tenant' and 'api_key'")
        return self


class RouteGraph(_Frozen):
    """One dynamic route: its name (its key in ``dynamic_routes``), bindings and nodes."""

    name: NodeId
    bind: list[Binding] = Field(min_length=1)
    start: NodeId
    nodes: dict[NodeId, Node] = Field(min_length=1, max_length=256)

    @model_validator(mode="after")
    def _well_formed(self) -> RouteGraph:
        if self.start not in self.nodes:
            raise ValueError(f"start: node {self.start!r} does not exist")
        for node_id, node in self.nodes.items():
            for exit_name, target in node.exits().items():
                if target not in self.nodes:
                    raise ValueError(
                        f"node {node_id!r}: exit {exit_name!r} leads to unknown node {target!r}"
                    )
        cycle = self._cycle_from(self.start, [])
        if cycle:
            raise ValueError(f"node {cycle[0]!r}: cycle {' -> '.join(cycle)}")
        reached = self.reachable()
        for node_id in self.nodes:
            if node_id not in reached:
                raise ValueError(f"node {node_id!r} is unreachable from start {self.start!r}")
        return self

    def _cycle_from(self, node_id: str, trail: list[str]) -> list[str]:
        """The first cycle met walking from ``node_id`` (exits in order), else []."""
        if node_id in trail:
            return [*trail[trail.index(node_id) :], node_id]
        for target in self.nodes[node_id].exits().values():
            cycle = self._cycle_from(target, [*trail, node_id])
            if cycle:
                return cycle
        return []

    def reachable(self) -> set[str]:
        seen: set[str] = set()
        todo = [self.start]
        while todo:
            node_id = todo.pop()
            if node_id not in seen:
                seen.add(node_id)
                todo.extend(self.nodes[node_id].exits().values())
        return seen


class DynamicRoutes(RootModel[dict[str, RouteGraph]]):
    """The ``dynamic_routes:`` section: graphs by name. A key binding beats a tenant one."""

    model_config = ConfigDict(frozen=True)

    root: dict[str, RouteGraph] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        """Each graph's ``name`` is its key (an explicit ``name`` must agree)."""
        if not isinstance(data, dict):
            return data
        named: dict[Any, Any] = {}
        for key, graph in data.items():
            if isinstance(graph, dict):
                if graph.get("name", key) != key:
                    raise ValueError(f"{key}: 'name' differs from the graph's key")
                graph = {**graph, "name": key}
            named[key] = graph
        return named

    @model_validator(mode="after")
    def _bindings_unique(self) -> DynamicRoutes:
        owner: dict[tuple[str, str], str] = {}
        for name, graph in self.root.items():
            for binding in graph.bind:
                kind = "tenant" if binding.tenant is not None else "api_key"
                key = (kind, binding.tenant or binding.api_key or "")
                if key in owner:
                    raise ValueError(f"{name}: {kind} {key[1]!r} is also bound to {owner[key]!r}")
                owner[key] = name
        return self

    def graph_for(self, *, tenant: str | None, api_key: str | None) -> RouteGraph | None:
        """The graph bound to the request's API key, else to its tenant, else None."""
        for kind, value in (("api_key", api_key), ("tenant", tenant)):
            if value is None:
                continue
            for graph in self.root.values():
                if any(getattr(b, kind) == value for b in graph.bind):
                    return graph
        return None

    def check_references(
        self,
        *,
        targets: Collection[str],
        providers: Collection[str] | None = None,
        domains: Collection[str] | None = None,
    ) -> None:
        """GraphError unless every model node's target and fallbacks are in ``targets``
        (the config's route names and ``provider:model`` ids) and, for what is given,
        provider lists name ``providers`` and conditions name ``domains``."""
        for name, graph in self.root.items():
            for node_id, node in graph.nodes.items():
                where = f"{name}.nodes.{node_id}"
                if isinstance(node, ModelNode):
                    _check_model(where, node, targets, providers)
                elif isinstance(node, ConditionNode) and domains is not None:
                    unknown = sorted(set(node.when.domain or ()) - set(domains))
                    if unknown:
                        raise GraphError(f"{where}.when.domain: unknown domain(s) {unknown}")


def _check_model(
    where: str, node: ModelNode, targets: Collection[str], providers: Collection[str] | None
) -> None:
    for model in (node.target, *node.fallback_models):
        if model not in targets:
            raise GraphError(f"{where}: {model!r} is no route or provider:model of the config")
    if node.provider is not None and providers is not None:
        unknown = sorted(set(node.provider.providers()) - set(providers))
        if unknown:
            raise GraphError(f"{where}.provider: unknown provider(s) {unknown}")


def _describe(error: ValidationError) -> str:
    """The first error as ``where: what`` (never the offending input: it could be a key)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def parse_dynamic_routes(
    data: Any,
    *,
    targets: Collection[str] | None = None,
    providers: Collection[str] | None = None,
    domains: Collection[str] | None = None,
) -> DynamicRoutes:
    """The ``dynamic_routes`` section (None: empty), or one GraphError line prefixed
    ``dynamic_routes.``. Model targets are checked when ``targets`` is given."""
    if data is None:
        return DynamicRoutes({})
    if not isinstance(data, dict):
        raise GraphError("dynamic_routes: must be a mapping of route names to graphs")
    try:
        routes = DynamicRoutes.model_validate(data)
    except ValidationError as exc:
        raise GraphError(f"dynamic_routes.{_describe(exc)}") from None
    if targets is not None:
        try:
            routes.check_references(targets=targets, providers=providers, domains=domains)
        except GraphError as exc:
            raise GraphError(f"dynamic_routes.{exc}") from None
    return routes
