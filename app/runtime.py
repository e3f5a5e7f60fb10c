"""The policy in force in this process, loaded once from ``providers.yaml``.

Held behind :class:`PolicyHolder` so that a later SIGHUP reload swaps it in one place.
"""

from __future__ import annotations

from functools import lru_cache

from app.config import load_config
from app.routing.policy import Policy
from app.settings import get_settings


class PolicyHolder:
    def __init__(self) -> None:
        self._policy: Policy | None = None

    @property
    def current(self) -> Policy:
        if self._policy is None:
            self._policy = self.load()
        return self._policy

    def load(self) -> Policy:
        settings = get_settings()
        return Policy(config=load_config(settings.providers), params=settings.routing)


@lru_cache(maxsize=1)
def policy_holder() -> PolicyHolder:
    return PolicyHolder()
