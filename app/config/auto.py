"""A route's ``auto`` router and cache/session ``affinity`` settings.

``routes.NAME.auto`` makes ``model: "auto"`` pick a model for the request within
the route's (the workspace's) rules: an objective, a spend profile's hard price
caps and model patterns. The request cannot change any of them.

``routes.NAME.affinity`` tunes cache affinity, on by default on every route: a
real prompt-cache read pins the request's context (its prefix hash) to the
deployment that reported it, and a session to it when the request has a
``session_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: What a request names in ``model`` to let the route's auto router choose.
AUTO_MODEL = "auto"

Objective = Literal["balanced", "price", "latency", "quality"]
SpendProfile = Literal["economy", "standard", "premium", "unrestricted", "custom"]

#: Hard caps (USD per 1M input tokens, per 1M output tokens) of each spend profile.
#: A model priced above either cap is not a candidate; ``custom`` takes the config's
#: own caps.
SPEND_PROFILE_CAPS: dict[str, tuple[float | None, float | None]] = {
    "economy": (0.5, 2.0),
    "standard": (3.0, 15.0),
    "premium": (15.0, 75.0),
    "unrestricted": (None, None),
}


class AutoConfig(BaseModel):
    """How ``model: "auto"`` chooses on this route."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    objective: Objective = "balanced"
    spend_profile: SpendProfile = "standard"
    #: ``custom`` caps (USD per 1M tokens); at least one with ``custom``, none otherwise.
    max_input_usd_per_mtok: float | None = Field(default=None, ge=0.0)
    max_output_usd_per_mtok: float | None = Field(default=None, ge=0.0)
    #: Model patterns (``fnmatch``) against ``provider:model``, ``provider/model`` and the
    #: model id: only models matching an ``allow`` pattern (none: all), none matching ``deny``.
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    #: Try the next ranked models after a retriable failure (off: the chosen model only).
    fallbacks: bool = True
    #: Capability margin added to the complexity's floor (scaled up by low confidence).
    capability_margin: float = Field(default=0.05, ge=0.0, le=0.5)
    #: Capability of a model with no ``quality_prior``: neutral, it widens nothing.
    default_quality: float = Field(default=0.7, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _caps_only_when_custom(self) -> AutoConfig:
        custom = self.spend_profile == "custom"
        given = self.max_input_usd_per_mtok is not None or self.max_output_usd_per_mtok is not None
        if custom and not given:
            raise ValueError("spend_profile custom: set max_input/max_output_usd_per_mtok")
        if given and not custom:
            raise ValueError("max_*_usd_per_mtok need spend_profile: custom")
        return self

    @property
    def caps(self) -> tuple[float | None, float | None]:
        """(input, output) caps in USD per 1M tokens; None: no cap."""
        if self.spend_profile == "custom":
            return self.max_input_usd_per_mtok, self.max_output_usd_per_mtok
        return SPEND_PROFILE_CAPS[self.spend_profile]


class AffinityConfig(BaseModel):
    """Cache and session affinity on a route (event time throughout)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    #: A context (prompt prefix) stays pinned this long after a cache read.
    context_ttl_s: float = Field(default=900.0, gt=0.0)
    #: A session pin is renewed by each cache read for this long ...
    session_ttl_s: float = Field(default=900.0, gt=0.0)
    #: ... for at most this much session activity from its first pin.
    session_max_s: float = Field(default=86_400.0, gt=0.0)
    #: Pins a route keeps (the soonest to expire go first).
    max_entries: int = Field(default=1024, ge=1, le=100_000)


DEFAULT_AFFINITY = AffinityConfig()


def auto_route(routes: Mapping[str, Any], default_route: str) -> str | None:
    """The route ``model: "auto"`` goes to: the default route if it has ``auto``, else the
    first route (config order) that has; None when none has."""
    default = routes.get(default_route)
    if default is not None and getattr(default, "auto", None) is not None:
        return default_route
    for name, route in routes.items():
        if getattr(route, "auto", None) is not None:
            return name
    return None
