"""One simulated provider's state: what a fault benchmark overrides, its figures, its calls
in flight and its prompt cache (the server: app/embedded/simulated/server.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from app.embedded.simulated.models import SimulatedModel
from app.embedded.simulated.prompt_cache import PromptCache
from app.embedded.simulated.streaming import StreamFaults


@dataclass
class ProviderOverride:
    outage: bool = False
    latency_factor: float = 1.0
    success_rate: float | None = None
    #: Every call answers 429 with Retry-After (``retry_after_s`` real seconds when set).
    rate_limited: bool = False
    retry_after_s: float | None = None
    #: Every call answers 200 with a body that is not a completion.
    malformed: bool = False
    #: The answer's text instead of the canned one.
    reply_text: str | None = None
    #: Faults of ``stream: true`` answers (app/embedded/simulated/streaming.py).
    stream: StreamFaults = field(default_factory=StreamFaults)


@dataclass
class ProviderStats:
    requests: int = 0
    ok: int = 0
    server_errors: int = 0
    rate_limited: int = 0
    concurrency_rejected: int = 0
    #: Successful answers that read the provider's prompt cache, and the tokens read.
    cache_reads: int = 0
    cached_tokens: int = 0


@dataclass
class ProviderState:
    """One simulated provider: its model and generator, overrides, figures, calls in
    flight and prompt cache."""

    model: SimulatedModel
    rng: random.Random
    override: ProviderOverride = field(default_factory=ProviderOverride)
    stats: ProviderStats = field(default_factory=ProviderStats)
    in_flight: int = 0
    #: Prefixes of the prompts it answered (app/embedded/simulated/prompt_cache.py).
    cache: PromptCache = field(default_factory=PromptCache)
