"""Simulated OpenAI-compatible providers for ``switchyard demo`` (CPU only, no network).

One aiohttp server on ``127.0.0.1:<free port>`` serves every simulated provider
under its own path prefix::

    POST http://127.0.0.1:PORT/<provider-id>/v1/chat/completions
    POST http://127.0.0.1:PORT/<provider-id>/v1/embeddings   (``kind: embeddings`` models)
    GET  http://127.0.0.1:PORT/<provider-id>/v1/models

The four models are the reference providers (docs/design.md#the-reference-providers):
their measured latency, success rate and RPM, their prices and limits; ids keep the
cost table's prefixes (``openai-``, ``anthropic-``, ``gemini-``, ``deepseek-``).
``EMBEDDING_MODELS`` adds two deployments of one embeddings model (``switchyard up``
serves them on route ``embeddings``): the same draws and faults, and a vector per text
from a hash of the text (``embeddings``).

Latency model
    Log-normal fitted to the table's p50 and p95::

        mu    = ln p50
        sigma = (ln p95 - ln p50) / 1.6449      # 1.6449 = z(0.95)

    so the median is p50 and the 95th percentile is p95 exactly. The fit is
    tight: it predicts p99 = exp(mu + 2.3263 sigma) ~ 0.73-0.77x the table's
    p99 (e.g. 911 ms vs 1 240 ms for GPT-4.1) — the real tail is heavier.

Outcomes
    Each request takes exactly two draws from its provider's
    ``random.Random``: one uniform ``u`` for the outcome, one log-normal
    latency. ``u < success_rate`` succeeds; the failure band is split into
    HTTP 503 (``server_error``) and, for ``rate_limit_share`` of failures,
    HTTP 429 with ``Retry-After``; the total failure rate stays
    ``1 - success_rate``. A 503 answers after the drawn latency, a 429 after
    ``RATE_LIMIT_LATENCY_FRACTION`` of it (a rate limiter rejects early).
    Because the number of draws per request is fixed, the n-th request of a
    provider always gets the same (outcome, latency) for a given seed.

Overrides (fault benchmarks)
    ``set_outage(pid, True)`` answers every call 503 at once,
    ``set_latency_factor`` stretches latencies, ``set_success_rate`` changes
    the success rate. Overridden requests still consume their two draws, so
    the sequence stays aligned with the request count.

``time_scale`` multiplies every sleep (not the reported ``usage``); tests use
e.g. 0.01. Requests beyond a provider's ``max_concurrency`` in flight get a
429 without consuming draws.

Prompt caches
    A successful answer reports ``usage.prompt_tokens_details.cached_tokens`` for the
    longest prefix of its messages the provider answered in the last five minutes, from
    1,024 tokens (``prompt_cache``): what cache affinity follows.

Modules: ``models`` (the table, ``draw``), ``server`` (:class:`SimulatedProviders`),
``provider_state`` (one provider's overrides and figures), ``openai_format`` (request
parsing, response bodies), ``prompt_cache``, ``providers_file``
(``providers.yaml`` for the router, with what the embedded stack shows: ``showcase``).
Their public names are re-exported here.
"""

from __future__ import annotations

from app.embedded.simulated.models import (
    DEFAULT_COMPLETION_TOKENS,
    DEFAULT_RATE_LIMIT_SHARE,
    EMBEDDING_MODELS,
    RATE_LIMIT_LATENCY_FRACTION,
    RETRY_AFTER_S,
    SEED_003_MODELS,
    UP_MODELS,
    Z95,
    Z99,
    Draw,
    Outcome,
    SimulatedModel,
    classify,
    draw,
    provider_rng,
    sample_latency_ms,
)
from app.embedded.simulated.openai_format import (
    CANNED_COMPLETION,
    RequestError,
    completion_body,
    error_body,
    estimate_prompt_tokens,
    parse_max_tokens,
    parse_messages,
)
from app.embedded.simulated.provider_state import ProviderOverride, ProviderStats
from app.embedded.simulated.providers_file import (
    demo_providers_yaml,
    provider_entry,
    providers_config,
)
from app.embedded.simulated.server import SimulatedProviders

__all__ = [
    "CANNED_COMPLETION",
    "DEFAULT_COMPLETION_TOKENS",
    "DEFAULT_RATE_LIMIT_SHARE",
    "EMBEDDING_MODELS",
    "RATE_LIMIT_LATENCY_FRACTION",
    "RETRY_AFTER_S",
    "SEED_003_MODELS",
    "UP_MODELS",
    "Z95",
    "Z99",
    "Draw",
    "Outcome",
    "ProviderOverride",
    "ProviderStats",
    "RequestError",
    "SimulatedModel",
    "SimulatedProviders",
    "classify",
    "completion_body",
    "demo_providers_yaml",
    "draw",
    "error_body",
    "estimate_prompt_tokens",
    "parse_max_tokens",
    "parse_messages",
    "provider_entry",
    "provider_rng",
    "providers_config",
    "sample_latency_ms",
]
