"""The one settings object.

Every tunable of the process is read here, from the environment, once. Routing
parameters keep the variable names of seed 000 (``BANDIT_STRATEGY``,
``CB_TIMEOUT_S`` ...); everything that belongs to the process itself is
prefixed ``SWITCHYARD_``.
"""

from __future__ import annotations

import math
from enum import StrEnum
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Strategy(StrEnum):
    UCB1 = "ucb1"
    THOMPSON = "thompson"


class Topics(BaseSettings):
    """Topic names: the only place they are spelled."""

    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_TOPIC_", frozen=True)

    requests: str = "llm.requests"
    decisions: str = "llm.decisions"
    outcomes: str = "llm.outcomes"
    responses: str = "llm.responses"
    deadletter: str = "llm.deadletter"
    #: Internal: accepted requests and attempt feedback, keyed by route, in the
    #: order the route's single writer applies them. This is the routing log.
    routing: str = "switchyard.routing"
    #: Internal: a decision together with the request it routes, for executors.
    dispatch: str = "switchyard.dispatch"


class RoutingParams(BaseSettings):
    """Seed 000 parameters, with the seed's environment variable names and defaults."""

    model_config = SettingsConfigDict(frozen=True)

    strategy: Strategy = Field(default=Strategy.UCB1, validation_alias="BANDIT_STRATEGY")
    exploration_bonus: float = Field(
        default=math.sqrt(2), ge=0.0, validation_alias="BANDIT_EXPLORATION_BONUS"
    )
    cost_weight: float = Field(default=0.1, ge=0.0, validation_alias="BANDIT_COST_WEIGHT")
    latency_weight: float = Field(default=0.15, ge=0.0, validation_alias="BANDIT_LATENCY_WEIGHT")
    cb_failure_threshold: int = Field(default=5, ge=1, validation_alias="CB_FAILURE_THRESHOLD")
    cb_timeout_s: float = Field(default=60.0, gt=0.0, validation_alias="CB_TIMEOUT_S")
    cb_half_open_max_calls: int = Field(default=3, ge=1, validation_alias="CB_HALF_OPEN_MAX_CALLS")
    max_attempts: int = Field(default=3, ge=1, le=10, validation_alias="SWITCHYARD_MAX_ATTEMPTS")


class Settings(BaseSettings):
    """Process settings. ``SWITCHYARD_BROKER`` names the Kafka cluster to use."""

    model_config = SettingsConfigDict(env_prefix="SWITCHYARD_", frozen=True)

    broker: str = "kafka://127.0.0.1:9092"
    providers: Path = Field(
        default=Path("providers.yaml"),
        validation_alias=AliasChoices("SWITCHYARD_PROVIDERS", "SWITCHYARD_PROVIDERS_FILE"),
    )
    app_id: str = "switchyard"
    data_dir: Path = Path(".switchyard/data")
    partitions: int = Field(default=4, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    session_timeout_s: float = 6.0
    heartbeat_interval_s: float = 1.0
    executor_concurrency: int = Field(default=256, ge=1)
    #: Largest accepted request, in bytes of its JSON.
    max_request_bytes: int = Field(default=1_000_000, ge=1024)
    #: How much of a rejected event the dead-letter record keeps.
    deadletter_max_bytes: int = Field(default=4096, ge=64)
    #: Turn on the Tansu workarounds (``app.compat.tansu``). The embedded stack sets it.
    tansu_compat: bool = False
    log_level: str = "warn"

    topics: Topics = Field(default_factory=Topics)
    routing: RoutingParams = Field(default_factory=RoutingParams)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
