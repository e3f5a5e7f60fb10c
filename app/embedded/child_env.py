"""The environment of a process Switchyard starts: built here, and only here.

A child gets the caller's environment without its ``SWITCHYARD_*`` variables (a
developer's shell does not change what ``up``, the demo, the benches and the tests run),
then the settings that concern every Switchyard process, taken from the caller's
:class:`~app.settings.Settings`, then what the starter sets itself (the broker's address,
a port, a work directory ...). A program that is not Switchyard's (the broker, the local
model's server, a mock provider) gets no settings at all: no token reaches it.

The settings a Switchyard child takes from its caller:

* the broker transport's tuning (:data:`TRANSPORT_TUNING`): a bench compares it in every
  process, not only in its own client;
* the worker web server's bind host (``SWITCHYARD_WEB_HOST``), the HTTP tokens
  (``SWITCHYARD_ADMIN_TOKEN``, ``SWITCHYARD_METRICS_TOKEN``) and Kafka's SASL and TLS
  (``SWITCHYARD_KAFKA_*``): a child is never less guarded than the process that started it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import Enum

from pydantic import SecretStr

from app.kafka_security import KafkaSecurity
from app.settings import Settings

#: The broker transport's tuning: fetch waits, linger, the router's local fold and calls
#: ahead, Faust's inline delivery (fields of ``Settings``).
TRANSPORT_TUNING = (
    "fetch_max_wait_ms",
    "fetch_idle_wait_ms",
    "producer_linger_ms",
    "router_local_fold",
    "call_ahead",
    "fast_delivery",
)
#: Where a child's web server listens, and who may read it.
GUARD_SETTINGS = ("web_host", "admin_token", "metrics_token", "credentials_key")
#: Fields of ``Settings`` every Switchyard child takes from its caller (with the whole of
#: ``Settings.kafka_security``).
INHERITED_SETTINGS = TRANSPORT_TUNING + GUARD_SETTINGS

SETTINGS_PREFIX = str(Settings.model_config.get("env_prefix", ""))
KAFKA_PREFIX = str(KafkaSecurity.model_config.get("env_prefix", ""))
#: The variables of the transport tuning.
TRANSPORT_TUNING_ENV = tuple(f"{SETTINGS_PREFIX}{name.upper()}" for name in TRANSPORT_TUNING)


def env_text(value: object) -> str | None:
    """A setting's value as its environment variable spells it (None: leave it unset)."""
    if value is None:
        return None
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


def settings_env(settings: Settings) -> dict[str, str]:
    """The ``SWITCHYARD_*`` variables of the inherited settings (unset ones left out)."""
    pairs = [(f"{SETTINGS_PREFIX}{n.upper()}", getattr(settings, n)) for n in INHERITED_SETTINGS]
    security = settings.kafka_security
    pairs += [
        (f"{KAFKA_PREFIX}{n.upper()}", getattr(security, n)) for n in type(security).model_fields
    ]
    return {name: text for name, value in pairs if (text := env_text(value)) is not None}


def child_env(
    settings: Settings | None,
    overrides: Mapping[str, str] | None = None,
    *,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A child's environment: ``base`` (default: this process's) without ``SWITCHYARD_*``,
    the inherited ``settings`` (None: a program that is not Switchyard's), ``overrides``."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if not k.upper().startswith(SETTINGS_PREFIX)}
    if settings is not None:
        env.update(settings_env(settings))
    env.update(overrides or {})
    return env
