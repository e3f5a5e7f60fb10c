"""Simulated OpenAI-compatible providers for ``switchyard demo`` (CPU only, no network).

One aiohttp server on ``127.0.0.1:<free port>`` serves every simulated provider
under its own path prefix::

    POST http://127.0.0.1:PORT/<provider-id>/v1/chat/completions
    GET  http://127.0.0.1:PORT/<provider-id>/v1/models

The four models follow seed 003's benchmark table (section 3) and its
``providers.yaml`` (section 2); ids keep seed 000's cost-prefix convention
(``openai-``, ``anthropic-``, ``gemini-``, ``deepseek-``).

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
"""

from __future__ import annotations

import asyncio
import math
import random
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

#: z-score of the 95th percentile of the standard normal distribution.
Z95 = 1.6449
#: z-score of the 99th percentile (only used to report the fit's implied p99).
Z99 = 2.3263
#: Seed 003's workload: 250 output tokens per request.
DEFAULT_COMPLETION_TOKENS = 250
#: A 429 is returned after this fraction of the drawn latency.
RATE_LIMIT_LATENCY_FRACTION = 0.05
#: Share of failures that are 429 (rate limited) rather than 503.
DEFAULT_RATE_LIMIT_SHARE = 0.2
#: ``Retry-After`` (seconds, before ``time_scale``) sent with a 429.
RETRY_AFTER_S = 1.0

CANNED_COMPLETION = "This is a simulated reply from {model}. No model was run."


@dataclass(frozen=True)
class SimulatedModel:
    """One simulated provider: seed 003's benchmark row plus its providers.yaml entry."""

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

    @property
    def mu(self) -> float:
        return math.log(self.p50_ms)

    @property
    def sigma(self) -> float:
        return (math.log(self.p95_ms) - math.log(self.p50_ms)) / Z95

    @property
    def fitted_p99_ms(self) -> float:
        return math.exp(self.mu + Z99 * self.sigma)


#: Seed 003, section 3 (latency, success, RPM) and section 2 (prices, limits).
SEED_003_MODELS: tuple[SimulatedModel, ...] = (
    SimulatedModel(
        "openai-gpt-4.1", "gpt-4.1", 720, 850, 1240, 0.9982, 1800,
        3.00, 8.00, 200, 0.50, 850, 12_000,
    ),
    SimulatedModel(
        "anthropic-claude-sonnet-4.5", "claude-sonnet-4.5", 980, 1100, 1680, 0.9991, 1200,
        3.00, 15.00, 150, 0.25, 1100, 15_000,
    ),
    SimulatedModel(
        "gemini-2.5-flash", "gemini-2.5-flash", 310, 380, 540, 0.9965, 3500,
        0.30, 2.50, 400, 0.15, 380, 8_000,
    ),
    SimulatedModel(
        "deepseek-v3.2", "deepseek-v3.2", 540, 620, 890, 0.9940, 2400,
        0.27, 0.42, 300, 0.10, 620, 10_000,
    ),
)  # fmt: skip


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


def estimate_prompt_tokens(messages: Sequence[Any]) -> int:
    """chars/4 over every message's text content, at least 1."""
    chars = sum(len(_message_text(m)) for m in messages)
    return max(1, chars // 4)


def _message_text(message: Any) -> str:
    if not isinstance(message, Mapping):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


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


@dataclass
class ProviderStats:
    requests: int = 0
    ok: int = 0
    server_errors: int = 0
    rate_limited: int = 0
    concurrency_rejected: int = 0


@dataclass
class _Provider:
    model: SimulatedModel
    rng: random.Random
    override: ProviderOverride = field(default_factory=ProviderOverride)
    stats: ProviderStats = field(default_factory=ProviderStats)
    in_flight: int = 0


def error_body(message: str, err_type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": None, "code": code}}


def completion_body(
    model: str, prompt_tokens: int, completion_tokens: int, finish_reason: str
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-sim-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": CANNED_COMPLETION.format(model=model)},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class RequestError(Exception):
    """A malformed request; answered 400 in OpenAI's error format."""


def parse_max_tokens(body: Mapping[str, Any]) -> int:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return DEFAULT_COMPLETION_TOKENS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError("max_tokens must be a positive integer")
    return value


def parse_messages(body: Mapping[str, Any]) -> list[Any]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array")
    return messages


class SimulatedProviders:
    """Seed 003's providers behind one local aiohttp server.

    ``async with SimulatedProviders(seed=7) as sim: sim.base_url("deepseek-v3.2")``
    """

    def __init__(
        self,
        models: Sequence[SimulatedModel] = SEED_003_MODELS,
        *,
        seed: int = 0,
        time_scale: float = 1.0,
        rate_limit_share: float = DEFAULT_RATE_LIMIT_SHARE,
        completion_tokens: int = DEFAULT_COMPLETION_TOKENS,
        host: str = "127.0.0.1",
    ) -> None:
        if time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        if not 0.0 <= rate_limit_share <= 1.0:
            raise ValueError("rate_limit_share must be in [0, 1]")
        self.seed = seed
        self.time_scale = time_scale
        self.rate_limit_share = rate_limit_share
        self.completion_tokens = completion_tokens
        self.host = host
        self._providers = {
            m.provider_id: _Provider(m, provider_rng(seed, m.provider_id)) for m in models
        }
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        if self._runner is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        runner = web.AppRunner(self._build_app(), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        self._runner, self._port = runner, sock.getsockname()[1]

    async def stop(self) -> None:
        runner, self._runner, self._port = self._runner, None, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> SimulatedProviders:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- introspection -------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("SimulatedProviders is not started")
        return self._port

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def base_url(self, provider_id: str) -> str:
        """OpenAI-style base URL (ends in ``/v1``) for ``provider_id``."""
        self._get(provider_id)
        return f"{self.root_url}/{provider_id}/v1"

    def base_urls(self) -> dict[str, str]:
        return {pid: self.base_url(pid) for pid in self._providers}

    @property
    def provider_ids(self) -> list[str]:
        return list(self._providers)

    @property
    def models(self) -> list[SimulatedModel]:
        return [p.model for p in self._providers.values()]

    def stats(self, provider_id: str) -> ProviderStats:
        return self._get(provider_id).stats

    # -- overrides -----------------------------------------------------------------

    def set_outage(self, provider_id: str, down: bool = True) -> None:
        self._get(provider_id).override.outage = down

    def set_latency_factor(self, provider_id: str, factor: float) -> None:
        if factor <= 0:
            raise ValueError("latency factor must be > 0")
        self._get(provider_id).override.latency_factor = factor

    def set_success_rate(self, provider_id: str, rate: float | None) -> None:
        if rate is not None and not 0.0 <= rate <= 1.0:
            raise ValueError("success rate must be in [0, 1]")
        self._get(provider_id).override.success_rate = rate

    def set_rate_limited(
        self, provider_id: str, limited: bool = True, retry_after_s: float | None = None
    ) -> None:
        override = self._get(provider_id).override
        override.rate_limited, override.retry_after_s = limited, retry_after_s

    def set_malformed(self, provider_id: str, malformed: bool = True) -> None:
        self._get(provider_id).override.malformed = malformed

    def clear_overrides(self, provider_id: str | None = None) -> None:
        targets = [provider_id] if provider_id is not None else list(self._providers)
        for pid in targets:
            self._get(pid).override = ProviderOverride()

    def reset(self, seed: int | None = None) -> None:
        """Rewind every provider's generator (optionally to a new seed) and zero stats."""
        if seed is not None:
            self.seed = seed
        for pid, provider in self._providers.items():
            provider.rng = provider_rng(self.seed, pid)
            provider.stats = ProviderStats()

    # -- request handling ----------------------------------------------------------

    def _get(self, provider_id: str) -> _Provider:
        try:
            return self._providers[provider_id]
        except KeyError:
            raise KeyError(f"unknown simulated provider {provider_id!r}") from None

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{provider}/v1/chat/completions", self._chat)
        app.router.add_get("/{provider}/v1/models", self._models)
        app.router.add_get("/healthz", self._health)
        return app

    async def _health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "providers": self.provider_ids})

    async def _models(self, request: web.Request) -> web.Response:
        provider = self._providers.get(request.match_info["provider"])
        if provider is None:
            return _unknown_provider(request.match_info["provider"])
        model = provider.model.model
        data = [{"id": model, "object": "model", "created": 0, "owned_by": "switchyard-sim"}]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.Response:
        provider = self._providers.get(request.match_info["provider"])
        if provider is None:
            return _unknown_provider(request.match_info["provider"])
        try:
            body = await _json_body(request)
            messages, max_tokens = parse_messages(body), parse_max_tokens(body)
            if body.get("stream"):
                raise RequestError("stream=true is not supported by the simulator")
        except RequestError as exc:
            return web.json_response(error_body(str(exc), "invalid_request_error"), status=400)
        if provider.in_flight >= provider.model.max_concurrency:
            provider.stats.concurrency_rejected += 1
            return self._rate_limited("concurrency limit reached")
        provider.in_flight += 1
        try:
            return await self._serve(provider, messages, max_tokens)
        finally:
            provider.in_flight -= 1

    async def _serve(
        self, provider: _Provider, messages: list[Any], max_tokens: int
    ) -> web.Response:
        override = provider.override
        result = draw(
            provider.rng,
            provider.model,
            success_rate=override.success_rate,
            rate_limit_share=self.rate_limit_share,
        )
        provider.stats.requests += 1
        if override.outage:
            provider.stats.server_errors += 1
            return _server_error("simulated outage")
        latency_ms = result.latency_ms * override.latency_factor
        if override.malformed:
            await self._sleep(latency_ms)
            return web.Response(status=200, text='{"choices": [', content_type="application/json")
        if override.rate_limited or result.outcome is Outcome.RATE_LIMITED:
            provider.stats.rate_limited += 1
            await self._sleep(latency_ms * RATE_LIMIT_LATENCY_FRACTION)
            return self._rate_limited("simulated rate limit", override.retry_after_s)
        await self._sleep(latency_ms)
        if result.outcome is Outcome.SERVER_ERROR:
            provider.stats.server_errors += 1
            return _server_error("simulated upstream failure")
        provider.stats.ok += 1
        return self._success(provider.model.model, messages, max_tokens, latency_ms)

    def _success(
        self, model: str, messages: list[Any], max_tokens: int, latency_ms: float
    ) -> web.Response:
        completion = min(self.completion_tokens, max_tokens)
        finish = "length" if max_tokens < self.completion_tokens else "stop"
        body = completion_body(model, estimate_prompt_tokens(messages), completion, finish)
        headers = {"x-simulated-latency-ms": f"{latency_ms:.3f}"}
        return web.json_response(body, headers=headers)

    def _rate_limited(self, message: str, retry_after_s: float | None = None) -> web.Response:
        retry_s = RETRY_AFTER_S * self.time_scale if retry_after_s is None else retry_after_s
        headers = {
            "Retry-After": str(max(0, math.ceil(retry_s))),
            "retry-after-ms": str(round(retry_s * 1000)),
        }
        body = error_body(message, "rate_limit_error", "rate_limit_exceeded")
        return web.json_response(body, status=429, headers=headers)

    async def _sleep(self, latency_ms: float) -> None:
        delay = latency_ms * self.time_scale / 1000.0
        if delay > 0:
            await asyncio.sleep(delay)


def _server_error(message: str) -> web.Response:
    body = error_body(message, "server_error", "service_unavailable")
    return web.json_response(body, status=503)


def _unknown_provider(provider_id: str) -> web.Response:
    body = error_body(
        f"no simulated provider {provider_id!r}", "invalid_request_error", "not_found"
    )
    return web.json_response(body, status=404)


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise RequestError("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    return body


# -- providers.yaml for the router ------------------------------------------------------


def provider_entry(model: SimulatedModel, base_url: str, time_scale: float = 1.0) -> dict[str, Any]:
    """One providers.yaml entry; baseline and timeout are scaled like the simulated latencies."""
    return {
        "id": model.provider_id,
        "base_url": base_url,
        "cost_per_mtok_input": model.cost_per_mtok_input,
        "cost_per_mtok_output": model.cost_per_mtok_output,
        "max_concurrency": model.max_concurrency,
        "weight_initial": model.weight_initial,
        "p95_latency_baseline_ms": model.p95_latency_baseline_ms * time_scale,
        "timeout_ms": max(1, round(model.timeout_ms * time_scale)),
        "models": [{"name": model.model}],
    }


def providers_config(
    base_urls: Mapping[str, str],
    models: Sequence[SimulatedModel] = SEED_003_MODELS,
    *,
    time_scale: float = 1.0,
    route: str = "chat",
) -> dict[str, Any]:
    """providers.yaml as a dict: one entry per model, one route listing them all."""
    entries = [provider_entry(m, base_urls[m.provider_id], time_scale) for m in models]
    return {
        "providers": entries,
        "routes": {route: {"providers": [m.provider_id for m in models]}},
        "default_route": route,
    }


def demo_providers_yaml(sim: SimulatedProviders, *, route: str = "chat") -> str:
    """providers.yaml text pointing the router at a started :class:`SimulatedProviders`."""
    config = providers_config(sim.base_urls(), sim.models, time_scale=sim.time_scale, route=route)
    header = (
        "# Generated by app.embedded.simulated: seed 003's providers, simulated locally.\n"
        f"# seed={sim.seed} time_scale={sim.time_scale}\n"
    )
    return header + str(yaml.safe_dump(config, sort_keys=False))
