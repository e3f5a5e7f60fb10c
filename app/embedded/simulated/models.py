"""The four reference providers and what one request to them does: ``draw`` (outcome, latency).

Their figures: docs/design.md#the-reference-providers.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import Enum
from typing import Literal

#: z-score of the 95th percentile of the standard normal distribution.
Z95 = 1.6449
#: z-score of the 99th percentile (only used to report the fit's implied p99).
Z99 = 2.3263
#: The reference workload: 250 output tokens per request.
DEFAULT_COMPLETION_TOKENS = 250
#: A 429 is returned after this fraction of the drawn latency.
RATE_LIMIT_LATENCY_FRACTION = 0.05
#: Share of failures that are 429 (rate limited) rather than 503.
DEFAULT_RATE_LIMIT_SHARE = 0.2
#: ``Retry-After`` (seconds, before ``time_scale``) sent with a 429.
RETRY_AFTER_S = 1.0


@dataclass(frozen=True)
class SimulatedModel:
    """One simulated provider: its measured row plus its providers.yaml entry."""

    provider_id: str
    model: str
    p50_ms: float
    p95_ms: float
    p99_ms: float
    success_rate: float
    max_rpm: int
    cost_per_mtok_input: float
    cost_per_mtok_output: float
    max_concurrency: int
    weight_initial: float
    p95_latency_baseline_ms: float
    timeout_ms: int
    #: What the showcase adds (app/embedded/simulated/providers_file.py): the price of
    #: prompt-cache reads (USD per 1M tokens; providers charge a tenth or a quarter of the
    #: input price) and a quality prior (the auto router's capability, 0-1).
    cost_per_mtok_cached_input: float | None = None
    quality_prior: float | None = None
    #: ``embeddings``: it serves ``/v1/embeddings`` (vectors from a hash of each text:
    #: app/embedded/simulated/embeddings.py), declared ``kind: embeddings``.
    kind: Literal["chat", "embeddings"] = "chat"

    @property
    def mu(self) -> float:
        return math.log(self.p50_ms)

    @property
    def sigma(self) -> float:
        return (math.log(self.p95_ms) - math.log(self.p50_ms)) / Z95

    @property
    def fitted_p99_ms(self) -> float:
        return math.exp(self.mu + Z99 * self.sigma)


#: The reference providers: latency, success, RPM, prices and limits; then the
#: showcase's cached-input price and quality prior.
SEED_003_MODELS: tuple[SimulatedModel, ...] = (
    SimulatedModel(
        "openai-gpt-4.1", "gpt-4.1", 720, 850, 1240, 0.9982, 1800,
        3.00, 8.00, 200, 0.50, 850, 12_000, 0.75, 0.88,
    ),
    SimulatedModel(
        "anthropic-claude-sonnet-4.5", "claude-sonnet-4.5", 980, 1100, 1680, 0.9991, 1200,
        3.00, 15.00, 150, 0.25, 1100, 15_000, 0.30, 0.92,
    ),
    SimulatedModel(
        "gemini-2.5-flash", "gemini-2.5-flash", 310, 380, 540, 0.9965, 3500,
        0.30, 2.50, 400, 0.15, 380, 8_000, 0.075, 0.75,
    ),
    SimulatedModel(
        "deepseek-v3.2", "deepseek-v3.2", 540, 620, 890, 0.9940, 2400,
        0.27, 0.42, 300, 0.10, 620, 10_000, 0.027, 0.70,
    ),
)  # fmt: skip


#: Two deployments of one embeddings model (OpenAI's text-embedding-3-small, $0.02 per 1M
#: input tokens, and the same model elsewhere): the same text gets the same vector from
#: either, so one may stand in for the other. Not among the reference chat providers:
#: ``switchyard up`` adds them, on a route of their own (``embeddings``).
EMBEDDING_MODELS: tuple[SimulatedModel, ...] = (
    SimulatedModel(
        "openai-embeddings", "text-embedding-3-small", 95, 160, 240, 0.9990, 3000,
        0.02, 0.0, 300, 0.0, 160, 5_000, kind="embeddings",
    ),
    SimulatedModel(
        "azure-embeddings", "text-embedding-3-small", 110, 190, 280, 0.9985, 2400,
        0.02, 0.0, 200, 0.0, 190, 5_000, kind="embeddings",
    ),
)  # fmt: skip
#: What ``switchyard up`` simulates: the reference chat providers and the embeddings ones.
UP_MODELS: tuple[SimulatedModel, ...] = (*SEED_003_MODELS, *EMBEDDING_MODELS)


class Outcome(Enum):
    OK = 200
    SERVER_ERROR = 503
    RATE_LIMITED = 429


@dataclass(frozen=True)
class Draw:
    """What one request will do: its outcome and its latency (ms, unscaled)."""

    outcome: Outcome
    latency_ms: float


def sample_latency_ms(rng: random.Random, model: SimulatedModel) -> float:
    """One log-normal latency draw (ms) fitted to the model's p50/p95."""
    return rng.lognormvariate(model.mu, model.sigma)


def classify(u: float, success_rate: float, rate_limit_share: float) -> Outcome:
    """Map a uniform draw in [0, 1) to an outcome; P(failure) = 1 - success_rate."""
    if u < success_rate:
        return Outcome.OK
    server_error_band = (1.0 - success_rate) * (1.0 - rate_limit_share)
    if u < success_rate + server_error_band:
        return Outcome.SERVER_ERROR
    return Outcome.RATE_LIMITED


def draw(
    rng: random.Random,
    model: SimulatedModel,
    *,
    success_rate: float | None = None,
    rate_limit_share: float = DEFAULT_RATE_LIMIT_SHARE,
) -> Draw:
    """The next request's (outcome, latency). Always consumes exactly two draws."""
    u = rng.random()
    latency = sample_latency_ms(rng, model)
    rate = model.success_rate if success_rate is None else success_rate
    return Draw(classify(u, rate, rate_limit_share), latency)


def provider_rng(seed: int, provider_id: str) -> random.Random:
    """A provider's generator; str seeds hash with SHA-512, so this is stable across runs."""
    return random.Random(f"{seed}:{provider_id}")
