"""``providers.yaml``: providers (prices, limits, ``models:``) grouped into routes.

A deployment is one (provider, model) pair, named ``provider:model`` as a request
pins it. A route is an alias a request names in ``model`` (``"chat"``) and the
ordered list of providers it may use; order is the deterministic tie-break.

API keys are interpolated from the environment (``${NAME}``), held as
``SecretStr`` and left out of ``routing_view()``, the config hash, ``repr``
and every error message.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.config.access import Budget as Budget
from app.config.access import Credential as Credential
from app.config.access import GatewayKey as GatewayKey
from app.config.auto import AffinityConfig, AutoConfig
from app.config.cache import CacheConfig
from app.config.dynamic_routes import DynamicRoutes, GraphError
from app.config.providers import ProviderConfig, deployment_id
from app.contract.features import DOMAIN_ORDER
from app.guardrails.config import GuardrailRule as GuardrailRule
from app.guardrails.config import Guardrails as Guardrails

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

class ConfigError(ValueError):
    """The providers file is missing, malformed, or refers to something that does not exist."""


ModeName = Literal["balanced", "price", "latency", "quality", "throughput"]


class LocalFirst(BaseModel):
    """Local-first (docs/design.md#routing, step 4): try a local deployment first; keep
    its answer when confident."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str
    #: Minimum confidence: exp(mean token log-probability) of the local answer.
    threshold: float = Field(default=0.75, ge=0.0, le=1.0)


class JudgeConfig(BaseModel):
    """The built-in judge: grade a sampled share of a route's answers with a pinned
    deployment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The judge's ``provider:model``; its provider must be on a route (pins are routed).
    deployment: str = Field(min_length=3)
    #: Share of the route's successful answers graded (deterministic per request id).
    sample_rate: float = Field(ge=0.0, le=1.0)
    #: What a good answer is: the judge's instructions, before the question and answer.
    rubric: str = Field(min_length=1, max_length=4000)
    #: Whether the judge may grade its own answers.
    allow_self: bool = False


class DataRules(BaseModel):
    """What a route, a tenant or a request requires of the deployments that may serve it
    (app/routing/data_policy.py); each can only add to the others' requirements."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Regions the request may be processed in (None: any).
    regions: list[str] | None = None
    #: Zero data retention: only deployments declaring ``data_retention: none``.
    zdr: bool = False
    #: ``deny``: only deployments declaring ``trains_on_data: false``.
    data_collection: Literal["allow", "deny"] = "allow"
    #: Certifications every deployment must hold.
    certifications: list[str] = Field(default_factory=list)


class RouteConfig(DataRules):
    model_config = ConfigDict(frozen=True, extra="forbid")

    providers: list[str] = Field(min_length=1)
    max_attempts: int | None = Field(default=None, ge=1, le=10)
    #: The route's (workspace's) default routing mode.
    mode: ModeName | None = None
    local_first: LocalFirst | None = None
    #: Mean cost per request (USD) the budget pacer holds the route to.
    cost_target_usd: float | None = Field(default=None, gt=0.0)
    #: The route's built-in judge (app/grades/judge.py), off when absent.
    judge: JudgeConfig | None = None
    #: ``model: "auto"`` on this route (app/config/auto.py), off when absent.
    auto: AutoConfig | None = None
    #: Cache/session affinity settings (absent: the defaults, affinity on).
    affinity: AffinityConfig | None = None
    #: Opt the route's requests in to its ``status: preview`` deployments.
    preview: bool = False
    #: The route's response cache (app/config/cache.py), off when absent.
    cache: CacheConfig | None = None


class ProviderLists(DataRules):
    """Provider lists (and a preset's data rules): applied before selection,
    every exclusion traced."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    only: list[str] | None = None
    ignore: list[str] = Field(default_factory=list)
    order: list[str] = Field(default_factory=list)
    #: The models allowed: model names or ``provider:model`` ids (None: all).
    models: list[str] | None = None


class RateLimit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int = Field(ge=1)
    window_s: float = Field(gt=0.0)


class Preset(ProviderLists):
    """A named preset (``presets:``), chosen per request (``preset: NAME``), by a gateway
    key or for a tenant: provider lists, allowed models and data rules that narrow the
    others, a mode, and defaults applied before routing: a system prompt put first,
    ``temperature`` and ``max_tokens`` where the request sets none
    (app/routing/presets.py)."""

    mode: ModeName | None = None
    system_prompt: str | None = Field(default=None, min_length=1, max_length=20_000)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, ge=1)


class TenantPolicy(ProviderLists):
    """A tenant's own preset: provider lists, mode and rate limit, and the named preset
    its requests are under (``preset``)."""

    mode: ModeName | None = None
    #: A name of ``presets``: applied to every request of the tenant.
    preset: str | None = None
    rate_limit: RateLimit | None = None
    #: Mean cost per request (USD) of this tenant's requests (its own pacer).
    cost_target_usd: float | None = Field(default=None, gt=0.0)


class RoutingConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    providers: list[ProviderConfig] = Field(min_length=1)
    routes: dict[str, RouteConfig] = Field(default_factory=dict)
    default_route: str = "chat"
    tenants: dict[str, TenantPolicy] = Field(default_factory=dict)
    #: Named presets (app/routing/presets.py), chosen per request, key or tenant.
    presets: dict[str, Preset] = Field(default_factory=dict)
    guardrails: Guardrails = Field(default_factory=Guardrails)
    #: Budgets: spending limits, each folded in a ledger of its own.
    budgets: list[Budget] = Field(default_factory=list)
    #: Dynamic routes: graphs bound to tenants and API keys (app/config/dynamic_routes.py).
    dynamic_routes: DynamicRoutes = Field(default_factory=lambda: DynamicRoutes({}))
    #: The gateway's API keys (app/gateway/); not routing: left out of the config hash.
    gateway_keys: list[GatewayKey] = Field(default_factory=list)
    #: Provider keys tenants and gateway keys bring, sealed (app/credentials/).
    credentials: list[Credential] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_references(self) -> RoutingConfig:
        ids = [p.id for p in self.providers]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate provider ids: {', '.join(duplicates)}")
        for name, route in self.routes.items():
            unknown = [p for p in route.providers if p not in ids]
            if unknown:
                raise ValueError(f"routes.{name}.providers: unknown provider(s) {unknown}")
            if route.local_first is not None and route.local_first.provider not in ids:
                raise ValueError(f"routes.{name}.local_first.provider: unknown provider")
            if route.judge is not None:
                self._check_judge(name, route.judge)
        keys = [b.key for b in self.budgets]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"budgets: more than one budget for {', '.join(twice)}")
        for budget in self.budgets:
            if budget.scope == "route" and budget.name not in self.route_names():
                raise ValueError(f"budgets: {budget.key} names no route")
        self._check_credentials(ids)
        named = [(f"tenants.{t}", p.preset) for t, p in self.tenants.items()]
        named += [(f"gateway_keys[{k.name}]", k.preset) for k in self.gateway_keys]
        for where, preset in named:
            if preset is not None and preset not in self.presets:
                raise ValueError(f"{where}.preset: {preset!r} is not one of presets")
        if self.dynamic_routes.root:
            self._check_dynamic_routes()
        if self.routes and self.default_route not in self.routes:
            raise ValueError(f"default_route {self.default_route!r} is not a route")
        return self

    def _check_credentials(self, provider_ids: list[str]) -> None:
        seen: set[str] = set()
        owners: set[tuple[str, str | None, str | None]] = set()
        for credential in self.credentials:
            where = f"credentials[{credential.id}]"
            if credential.id in seen:
                raise ValueError(f"{where}: each id once")
            if credential.provider not in provider_ids:
                raise ValueError(f"{where}.provider: unknown provider {credential.provider!r}")
            owner = (credential.provider, credential.tenant, credential.key)
            if owner in owners:
                raise ValueError(f"{where}: a second credential for the same provider and owner")
            seen.add(credential.id)
            owners.add(owner)

    def _check_dynamic_routes(self) -> None:
        try:
            self.dynamic_routes.check_references(
                targets={*self.route_names(), *self.deployment_ids()},
                providers={p.id for p in self.providers},
                domains={*DOMAIN_ORDER, "general"},
            )
        except GraphError as exc:
            raise ValueError(f"dynamic_routes.{exc}") from None

    def _check_judge(self, route: str, judge: JudgeConfig) -> None:
        where = f"routes.{route}.judge.deployment"
        if judge.deployment not in self.deployment_ids():
            raise ValueError(f"{where}: {judge.deployment!r} is no configured provider:model")
        provider = judge.deployment.partition(":")[0]
        if not any(provider in r.providers for r in self.routes.values()):
            raise ValueError(f"{where}: provider {provider!r} is on no route (pins are routed)")

    @cached_property
    def provider_by_id(self) -> dict[str, ProviderConfig]:
        return {p.id: p for p in self.providers}

    def route_names(self) -> list[str]:
        return list(self.routes) if self.routes else [self.default_route]

    def route_providers(self, route: str) -> list[ProviderConfig]:
        """The providers of a route, in config order. Raises KeyError for an unknown route."""
        if not self.routes and route == self.default_route:
            return list(self.providers)
        return [self.provider_by_id[p] for p in self.routes[route].providers]

    @cached_property
    def budget_by_key(self) -> dict[str, Budget]:
        return {b.key: b for b in self.budgets}

    def deployment_ids(self) -> list[str]:
        return [deployment_id(p.id, m.name) for p in self.providers for m in p.models]

    def routes_with(self, provider_id: str) -> list[str]:
        return [
            r for r in self.route_names() if provider_id in {p.id for p in self.route_providers(r)}
        ]

    @cached_property
    def named_models(self) -> dict[str, str]:
        """Model names that name one deployment and no route: the name -> its deployment.
        A request may send such a bare name (the ``model`` an answer reports)."""
        found: dict[str, list[str]] = {}
        for deployment in self.deployment_ids():
            found.setdefault(deployment.partition(":")[2], []).append(deployment)
        routes = set(self.route_names())
        return {n: d[0] for n, d in found.items() if len(d) == 1 and n not in routes}

    def resolve_route(self, model: str | None) -> str | None:
        """The route a request's ``model`` names, or None when it names none."""
        name = model or self.default_route
        return name if name in self.route_names() else None

    def routing_view(self) -> dict[str, Any]:
        """Everything that can change a decision, without secrets. Hashed into decisions."""
        view = self.model_dump(
            mode="json", exclude={"providers": {"__all__": {"api_key"}}, "gateway_keys": True}
        )
        for route in view["routes"].values():
            if route.get("cache") is None:  # no cache: the hash it had before caches existed
                route.pop("cache", None)
        return view

    @cached_property
    def config_hash(self) -> str:
        canonical = json.dumps(self.routing_view(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _interpolate(value: Any, path: str, env: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {
            k: _interpolate(v, f"{path}.{k}" if path else str(k), env) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_interpolate(v, f"{path}[{i}]", env) for i, v in enumerate(value)]
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                raise ConfigError(f"{path}: environment variable {name} is not set")
            return env[name]

        return _ENV_REF.sub(substitute, value)
    return value


def interpolate(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """``data`` with every ``${NAME}`` replaced from ``env`` (ConfigError naming the field
    of a variable that is not set)."""
    resolved: dict[str, Any] = _interpolate(data, "", env)
    return resolved


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    # Never echo the offending input: it could be a key.
    return f"{where}: {first['msg']}"


def parse_config(data: Any, env: Mapping[str, str] | None = None) -> RoutingConfig:
    """The config ``data`` describes, its ``${NAME}`` references resolved from ``env``
    (None: no environment, a reference is an error). The process environment is read
    only where a file is loaded (:func:`app.policy.files.load_config`)."""
    if not isinstance(data, dict):
        raise ConfigError("providers file must be a mapping with a 'providers' list")
    resolved = _interpolate(data, "", {} if env is None else env)
    try:
        return RoutingConfig.model_validate(resolved)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
