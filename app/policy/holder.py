"""The policy in force in this process.

Before a worker follows the policy topic, and in tools that never do,
it is the providers file, read once. A worker's :class:`PolicyHolder` then holds
the :class:`~app.routing.book.PolicyBook` of every version: the router folds each
route with the version its state names (the same book), and the rest of the
worker (ingest, executors, ticks, judges) uses the newest, with this worker's own
literal API keys filled in. Its :meth:`PolicyHolder.follower` reads the policy topic into
that book (the relay, the worker's timer, ingest's catch-up before it refuses a route).
"""

from __future__ import annotations

import os
from functools import lru_cache

from app.config.providers import ProviderConfig
from app.config.schema import RoutingConfig
from app.policy.document import with_local_keys
from app.policy.files import load_config
from app.policy.log import PolicyFollower
from app.routing.book import PolicyBook
from app.routing.policy import Policy
from app.settings import get_settings


class PolicyHolder:
    def __init__(self) -> None:
        self._file: Policy | None = None
        self.book = PolicyBook(env=os.environ)  # this worker's API keys
        self._keyed: dict[int, Policy] = {}
        self._follower: PolicyFollower | None = None

    def follower(self) -> PolicyFollower:
        """This process's follower of the policy topic, reading into :attr:`book`."""
        if self._follower is None:
            self._follower = PolicyFollower(get_settings(), book=self.book)
        return self._follower

    def adopt(self, started: PolicyFollower) -> None:
        """Follow on from where ``started`` read the topic (a worker's start, in another
        event loop: the new follower's lock is this loop's)."""
        self._follower = PolicyFollower(
            started.settings,
            book=self.book,
            versions=list(started.versions),
            next_offset=started.next_offset,
            read_since=started.read_since,
        )

    @property
    def current(self) -> Policy:
        """The newest version (keys filled in), or the providers file before any."""
        latest = self.book.latest()
        return self._file_policy() if latest is None else self._with_keys(latest)

    def version(self, number: int) -> Policy | None:
        """Version ``number`` with keys filled in (None: unknown; 0: the file's policy)."""
        if number == 0 and not self.book:
            return self._file_policy()
        known = self.book.get(number)
        return None if known is None else self._with_keys(known)

    def provider(self, provider_id: str, version: int) -> ProviderConfig | None:
        """A provider as version ``version`` configured it, else as the newest does."""
        for policy in (self.version(version), self.current):
            found = None if policy is None else policy.config.provider_by_id.get(provider_id)
            if found is not None:
                return found
        return None

    def load(self) -> Policy:
        settings = get_settings()
        self._file = Policy(config=load_config(settings.providers), params=settings.routing)
        return self._file

    def _file_policy(self) -> Policy:
        return self._file if self._file is not None else self.load()

    def _local(self) -> RoutingConfig | None:
        try:
            return self._file_policy().config
        except ValueError:
            return None  # no readable file here: documents' ${VARIABLE} keys only

    def _with_keys(self, policy: Policy) -> Policy:
        keyed = self._keyed.get(policy.version)
        if keyed is None:
            config = with_local_keys(policy, self._local())
            keyed = Policy(config=config, params=policy.params, version=policy.version)
            self._keyed[policy.version] = keyed
        return keyed


@lru_cache(maxsize=1)
def policy_holder() -> PolicyHolder:
    return PolicyHolder()
