"""The configuration a routing decision depends on: providers.yaml plus the routing parameters."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from app.config.providers import ProviderConfig, deployment_id
from app.config.schema import RoutingConfig
from app.routing.breaker import BreakerParams
from app.routing.params import BreakerMode, RoutingParams

#: The reference workload used to price one request: 800 input + 250 output tokens
#: (docs/design.md#the-reference-providers).
WORKLOAD_INPUT_TOKENS = 800
WORKLOAD_OUTPUT_TOKENS = 250


@dataclass(frozen=True, slots=True)
class Arm:
    """One candidate deployment of a route, in config order."""

    deployment: str
    provider: ProviderConfig
    model: str

    @property
    def workload_cost_usd(self) -> float:
        """The reference workload priced at the provider's rates."""
        return (
            WORKLOAD_INPUT_TOKENS * self.provider.input_price
            + WORKLOAD_OUTPUT_TOKENS * self.provider.output_price
        ) / 1_000_000


@dataclass(frozen=True)
class Policy:
    config: RoutingConfig
    params: RoutingParams = field(default_factory=RoutingParams)
    #: Its version on the policy topic; 0: a policy no event carried (a file
    #: read directly, as tests, benches and simulators do).
    version: int = 0

    @cached_property
    def breaker(self) -> BreakerParams:
        ewma = self.params.cb_mode is BreakerMode.EWMA
        return BreakerParams(
            failure_threshold=self.params.cb_failure_threshold,
            timeout_s=self.params.ewma_open_s if ewma else self.params.cb_timeout_s,
            half_open_max_calls=self.params.cb_half_open_max_calls,
            ewma=ewma,
            ewma_threshold=self.params.ewma_open_threshold,
            ewma_min_observations=self.params.ewma_min_observations,
        )

    def arms(self, route: str) -> list[Arm]:
        """The route's deployments in config order; none for a route no longer configured."""
        if route not in self.config.route_names():
            return []
        return [
            Arm(deployment_id(p.id, p.default_model), p, p.default_model)
            for p in self.config.route_providers(route)
        ]

    def max_attempts(self, route: str) -> int:
        configured = self.config.routes.get(route)
        if configured is not None and configured.max_attempts is not None:
            return configured.max_attempts
        return self.params.max_attempts

    @cached_property
    def memo(self) -> dict[Hashable, Any]:
        """Computations of the fold that depend on the policy alone (it never changes, so
        they never go stale), by the caller's key."""
        return {}

    @cached_property
    def config_hash(self) -> str:
        """Hash of everything that can change a decision (never secrets)."""
        view = {"config": self.config.routing_view(), "params": self.params.model_dump(mode="json")}
        canonical = json.dumps(view, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]
