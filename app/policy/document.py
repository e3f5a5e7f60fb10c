"""A providers file as a policy document: validated, and with no secret in it.

What travels in a ``policy.proposed`` event is the file with its ``${VARIABLE}``
references resolved where it is applied — everything a decision reads is fixed in
the document, the same for every worker — minus what must not leave the machine:
an ``api_key`` stays as the ``${VARIABLE}`` it names (each worker resolves it from
its own environment); a literal key is left out (the worker whose file has it
keeps using it, :func:`with_local_keys`); the gateway's key hashes stay with the
gateway. The seed parameters go with it, so every worker folds with the same ones.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from app.config.schema import ConfigError, RoutingConfig, interpolate, parse_config
from app.contract.policy import PolicyDocument
from app.policy.files import read_yaml
from app.routing.book import EnvOrDefault, document_hash, params_document
from app.routing.params import RoutingParams
from app.routing.policy import Policy

_WHOLE_REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")


def document_from_file(path: Path, params: RoutingParams) -> PolicyDocument:
    """The policy a providers file describes. Raises :class:`ConfigError` (one line naming
    the field) for an invalid file; API key variables need not be set where this runs."""
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: providers file must be a mapping with a 'providers' list")
    data = {k: v for k, v in raw.items() if k != "gateway_keys"}
    providers = [p if isinstance(p, dict) else {} for p in data.get("providers") or []]
    keys = [_travelling_key(p.get("api_key")) for p in providers]
    data["providers"] = [{k: v for k, v in p.items() if k != "api_key"} for p in providers]
    try:
        config = interpolate(data, os.environ)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    for provider, key in zip(config["providers"], keys, strict=True):
        if key is not None:
            provider["api_key"] = key
    document = PolicyDocument(config=config, params=params_document(params))
    try:
        check_document(document)  # every check the worker makes, with the same messages
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return document


def check_document(document: PolicyDocument) -> None:
    """Raise :class:`ConfigError` if a document's config or parameters are invalid."""
    parse_config(document.config, EnvOrDefault({}, "unset"))  # no environment needed
    try:
        RoutingParams(**document.params)
    except ValueError as exc:
        raise ConfigError(f"params: {str(exc).splitlines()[0]}") from None


def describe(document: PolicyDocument) -> dict[str, Any]:
    """A short summary of a document for ``switchyard policy history``."""
    config = document.config
    routes = config.get("routes") or {}
    return {
        "hash": document_hash(document),
        "providers": [p.get("id") for p in config.get("providers") or []],
        "routes": sorted(routes) if routes else [config.get("default_route", "chat")],
        "strategy": document.params.get("BANDIT_STRATEGY"),
    }


def with_local_keys(policy: Policy, local: RoutingConfig | None) -> RoutingConfig:
    """The policy's config with the literal keys of this worker's own file filled in where
    the document carried none (same provider id)."""
    config = policy.config
    if local is None:
        return config
    keys = {p.id: p.api_key for p in local.providers if p.api_key.get_secret_value()}
    providers = [
        p.model_copy(update={"api_key": keys[p.id]})
        if not p.api_key.get_secret_value() and p.id in keys
        else p
        for p in config.providers
    ]
    return config.model_copy(update={"providers": providers})


def _travelling_key(key: Any) -> str | None:
    """An ``api_key`` as a document carries it: the variable it names, or nothing."""
    return key if isinstance(key, str) and _WHOLE_REFERENCE.match(key) else None


__all__ = [
    "ConfigError",
    "check_document",
    "describe",
    "document_from_file",
    "with_local_keys",
]
