"""Who may spend what: the gateway's API keys and the budgets (parts of providers.yaml)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The windows a budget's limits are counted in: UTC minutes, hours, days and months.
WINDOWS = ("minute", "hour", "day", "month")
#: What a budget limits: requests, tokens (input and output) and dollars.
UNITS = ("requests", "tokens", "usd")


class Budget(BaseModel):
    """Requests, tokens and dollars a tenant, an API key (the gateway key's ``name``) or a
    route may use per UTC minute, hour, day and month; requests beyond a limit are refused
    (``budget_exceeded``, 429 with a Retry-After when a later window would take them).

    A request is counted on its first attempt (not again for retries and fallbacks);
    tokens are the input and output tokens its attempts reported; dollars their cost.
    ``scope: tenant, name: "*"`` is the limit of the requests that name no tenant, together.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    scope: Literal["tenant", "key", "route"]
    name: str = Field(min_length=1, max_length=200)
    requests_per_minute: int | None = Field(default=None, gt=0)
    requests_per_hour: int | None = Field(default=None, gt=0)
    requests_per_day: int | None = Field(default=None, gt=0)
    requests_per_month: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_hour: int | None = Field(default=None, gt=0)
    tokens_per_day: int | None = Field(default=None, gt=0)
    tokens_per_month: int | None = Field(default=None, gt=0)
    usd_per_minute: float | None = Field(default=None, gt=0.0)
    usd_per_hour: float | None = Field(default=None, gt=0.0)
    usd_per_day: float | None = Field(default=None, gt=0.0)
    usd_per_month: float | None = Field(default=None, gt=0.0)
    #: Output tokens an attempt is assumed to produce when the request sets no
    #: ``max_tokens`` (its worst case is held until it ends).
    default_max_tokens: int = Field(default=4096, ge=1)

    @property
    def key(self) -> str:
        return f"{self.scope}:{self.name}"

    def limit(self, unit: str, window: str) -> float | None:
        """The limit of ``unit`` per ``window`` (None: not limited)."""
        value: float | None = getattr(self, f"{unit}_per_{window}")
        return value

    def limits(self) -> list[tuple[str, str, float]]:
        """Every (unit, window, limit) set."""
        found = []
        for unit in UNITS:
            for window in WINDOWS:
                value = self.limit(unit, window)
                if value is not None:
                    found.append((unit, window, value))
        return found

    @model_validator(mode="after")
    def _some_limit(self) -> Budget:
        if not self.limits():
            raise ValueError(
                f"budget {self.key}: set a limit (requests_, tokens_ or usd_ per_minute, "
                "per_hour, per_day or per_month)"
            )
        if self.name == "*" and self.scope != "tenant":
            raise ValueError(f"budget {self.key}: '*' names the requests without a tenant")
        return self


class GatewayKey(BaseModel):
    """A Bearer API key of the gateway, stored as its SHA-256: never the key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    #: The tenant its requests are made for (its preset, rate limit and budget apply).
    tenant: str | None = None
    #: A label for logs and metrics (never the key or its hash).
    name: str = Field(default="key", max_length=100)
    #: The routes (``model`` aliases) it may use; None: all (403 otherwise).
    routes: list[str] | None = None
    #: The named preset its requests are under (a request may name no other).
    preset: str | None = None


class Credential(BaseModel):
    """A provider key a tenant or a gateway key brings (app/credentials/): sealed with
    the workers' master key, referenced by ``id`` in outcomes, never in clear."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    provider: str
    tenant: str | None = None
    #: A gateway key's ``name``: its requests use this credential (before the tenant's).
    key: str | None = None
    #: ``switchyard credentials seal``'s token.
    sealed: str = Field(min_length=16, max_length=4096)
    #: ``none``: the own key only; ``managed``: when the own key is refused (401, 403) or
    #: rate limited (429), the same attempt calls again with the deployment's own key.
    fallback: Literal["none", "managed"] = "none"

    @model_validator(mode="after")
    def _one_owner(self) -> Credential:
        if (self.tenant is None) == (self.key is None):
            raise ValueError(f"credential {self.id!r}: a tenant or a key, one of them")
        return self
