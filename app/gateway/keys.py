"""Bearer API keys: looked up by their SHA-256, mapped to a tenant (pure).

The providers file stores only hashes (``gateway_keys: [{sha256, tenant, name}]``);
a key itself is never stored, logged, put in an event or echoed in an error.
``switchyard gateway --hash-key`` prints the hash of a key read from stdin.
"""

from __future__ import annotations

import hashlib
import hmac

from app.config.schema import GatewayKey, RoutingConfig
from app.gateway.errors import GatewayError


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """The configured keys, by hash."""

    def __init__(self, keys: list[GatewayKey]) -> None:
        self._by_hash = {k.sha256: k for k in keys}

    @classmethod
    def of(cls, config: RoutingConfig) -> KeyRing:
        return cls(list(config.gateway_keys))

    def authenticate(self, authorization: str | None) -> GatewayKey:
        """The key an ``Authorization: Bearer`` header names; 401 when none does."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise GatewayError(
                401, "missing API key (Authorization: Bearer ...)", "missing_api_key"
            )
        digest = hash_key(token)
        for known, key in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return key
        raise GatewayError(401, "invalid API key", "invalid_api_key")


def check_route(key: GatewayKey, route: str) -> None:
    """403 when the key may not use ``route``."""
    if key.routes is not None and route not in key.routes:
        raise GatewayError(
            403,
            f"this API key may not use model {route!r}",
            "model_not_allowed",
            should_retry=False,
        )
