"""The versions of the policy, as the fold uses them.

A :class:`PolicyBook` maps each version on the policy topic to the
:class:`~app.routing.policy.Policy` its document describes. Every worker builds
the same policy from the same document: the document carries every parameter, and
its ``${VARIABLE}`` references (API keys, which no decision reads) are resolved from
the environment the book is given (a worker's own; none for a replay), a variable
it lacks reading as empty, so the decision-relevant part is the document's own. A
route folds with the version its state names (:attr:`RouteState.policy_version`); a
route that has folded no ``policy.changed`` yet uses the first version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.config.schema import parse_config
from app.contract.policy import PolicyDocument
from app.routing.params import RoutingParams
from app.routing.policy import Policy


def document_hash(document: PolicyDocument) -> str:
    """A stable hash of a document: the same on every worker, whatever its environment."""
    canonical = json.dumps(document.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class EnvOrDefault(dict[str, str]):
    """An environment in which a variable that is not set reads as ``default``."""

    def __init__(self, env: Mapping[str, str], default: str) -> None:
        super().__init__(env)
        self.default = default

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return self.default


def policy_from_document(
    document: PolicyDocument, version: int, env: Mapping[str, str] | None = None
) -> Policy:
    """The policy a document describes, as version ``version`` (``env``: what its
    ``${VARIABLE}`` references read; none given, every one reads as empty)."""
    config = parse_config(document.config, EnvOrDefault(env or {}, ""))
    params = RoutingParams(**document.params)
    return Policy(config=config, params=params, version=version)


def params_document(params: RoutingParams) -> dict[str, Any]:
    """The parameters as a document carries them (by their environment names, the names
    ``RoutingParams`` is built from)."""
    values = params.model_dump(mode="json")
    return {_env_name(name): value for name, value in values.items()}


def _env_name(field_name: str) -> str:
    alias = RoutingParams.model_fields[field_name].validation_alias
    return alias if isinstance(alias, str) else field_name


@dataclass
class PolicyBook:
    """Every version known, by number."""

    versions: dict[int, Policy] = field(default_factory=dict)
    hashes: dict[int, str] = field(default_factory=dict)
    #: What the documents' ``${VARIABLE}`` references read (a worker's environment, for
    #: its API keys; none for a replay).
    env: Mapping[str, str] = field(default_factory=dict)

    def add(self, version: int, document: PolicyDocument, digest: str | None = None) -> Policy:
        known = self.versions.get(version)
        if known is not None:
            return known
        policy = policy_from_document(document, version, self.env)
        self.versions[version] = policy
        self.hashes[version] = digest if digest is not None else document_hash(document)
        return policy

    def get(self, version: int) -> Policy | None:
        return self.versions.get(version)

    def first(self) -> Policy | None:
        return self.versions[min(self.versions)] if self.versions else None

    def latest(self) -> Policy | None:
        return self.versions[max(self.versions)] if self.versions else None

    def latest_version(self) -> int:
        return max(self.versions, default=0)

    def __bool__(self) -> bool:
        return bool(self.versions)
