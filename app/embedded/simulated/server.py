"""The aiohttp server behind every simulated provider, and the overrides of fault benchmarks."""

from __future__ import annotations

import asyncio
import json
import math
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from aiohttp import web

from app.embedded.simulated.embeddings import (
    EmbeddingsAsked,
    embeddings_answer,
    parse_embeddings,
)
from app.embedded.simulated.judging import judge_reply
from app.embedded.simulated.models import (
    DEFAULT_COMPLETION_TOKENS,
    DEFAULT_RATE_LIMIT_SHARE,
    RATE_LIMIT_LATENCY_FRACTION,
    RETRY_AFTER_S,
    SEED_003_MODELS,
    Outcome,
    SimulatedModel,
    draw,
    provider_rng,
)
from app.embedded.simulated.openai_format import (
    RequestError,
    completion_body,
    error_body,
    estimate_prompt_tokens,
    invalid_request_response,
    read_chat_request,
    read_json_body,
    server_error_response,
    unknown_provider_response,
)
from app.embedded.simulated.provider_state import (
    ProviderOverride,
    ProviderState,
    ProviderStats,
)
from app.embedded.simulated.streaming import (
    FIRST_TOKEN_SHARE,
    StreamedAnswer,
    StreamFaults,
    stream_answer,
)
from app.lifetime import AsyncStarted

#: What a handler answers: a response, or a stream of server-sent events.
Answer = TypeVar("Answer", bound=web.StreamResponse)


class SimulatedProviders(AsyncStarted):
    """The reference providers behind one local aiohttp server.

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
            m.provider_id: ProviderState(m, provider_rng(seed, m.provider_id)) for m in models
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

    def set_reply_text(self, provider_id: str, text: str | None) -> None:
        self._get(provider_id).override.reply_text = text

    def set_stream_faults(
        self,
        provider_id: str,
        *,
        cut_after: int | None = None,
        split_bytes: bool = False,
        split_surrogates: bool = False,
    ) -> None:
        """``stream: true`` answers: cut after ``cut_after`` content pieces (0: before any),
        events split inside a UTF-8 character, text split inside a UTF-16 pair."""
        faults = StreamFaults(cut_after, split_bytes, split_surrogates)
        self._get(provider_id).override.stream = faults

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
            provider.cache.clear()

    # -- request handling ----------------------------------------------------------

    def _get(self, provider_id: str) -> ProviderState:
        try:
            return self._providers[provider_id]
        except KeyError:
            raise KeyError(f"unknown simulated provider {provider_id!r}") from None

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{provider}/v1/chat/completions", self._chat)
        app.router.add_post("/{provider}/v1/embeddings", self._embeddings)
        app.router.add_get("/{provider}/v1/models", self._models)
        app.router.add_get("/healthz", self._health)
        return app

    async def _health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "providers": self.provider_ids})

    async def _models(self, request: web.Request) -> web.Response:
        provider = self._providers.get(request.match_info["provider"])
        if provider is None:
            return unknown_provider_response(request.match_info["provider"])
        model = provider.model.model
        data = [{"id": model, "object": "model", "created": 0, "owned_by": "switchyard-sim"}]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        provider = self._providers.get(request.match_info["provider"])
        if provider is None:
            return unknown_provider_response(request.match_info["provider"])
        try:
            body, messages, max_tokens = await read_chat_request(request)
        except RequestError as exc:
            return invalid_request_response(str(exc))
        if body.get("stream") is True:
            return await self._in_slot(
                provider,
                lambda: self._serve_stream(request, body, provider, messages, max_tokens),
            )
        return await self._in_slot(provider, lambda: self._serve(provider, messages, max_tokens))

    async def _in_slot(
        self, provider: ProviderState, serve: Callable[[], Awaitable[Answer]]
    ) -> Answer | web.Response:
        """``serve()`` in one of the provider's ``max_concurrency`` slots; a 429 when none
        is free."""
        if provider.in_flight >= provider.model.max_concurrency:
            provider.stats.concurrency_rejected += 1
            return self._rate_limited("concurrency limit reached")
        provider.in_flight += 1
        try:
            return await serve()
        finally:
            provider.in_flight -= 1

    async def _serve_stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        provider: ProviderState,
        messages: list[Any],
        max_tokens: int,
    ) -> web.StreamResponse:
        """``stream: true``: the same draw and failures; a success as server-sent chunks,
        the first after ``FIRST_TOKEN_SHARE`` of the drawn latency."""
        answered = await self._serve(provider, messages, max_tokens, FIRST_TOKEN_SHARE)
        if answered.status != 200 or provider.override.malformed:
            return answered
        whole = json.loads(answered.body)  # type: ignore[arg-type]
        latency_ms = float(answered.headers["x-simulated-latency-ms"])
        options = body.get("stream_options")
        answer = StreamedAnswer(
            model=whole["model"],
            content=whole["choices"][0]["message"]["content"],
            finish_reason=whole["choices"][0]["finish_reason"],
            usage=whole["usage"],
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            spread_s=latency_ms * (1 - FIRST_TOKEN_SHARE) * self.time_scale / 1000.0,
        )
        return await stream_answer(request, answer, provider.override.stream)

    async def _serve(
        self, provider: ProviderState, messages: list[Any], max_tokens: int, share: float = 1.0
    ) -> web.Response:
        failure, latency_ms = await self._faults(provider, '{"choices": [', share)
        if failure is not None:
            return failure
        provider.stats.ok += 1
        cached = provider.cache.serve(messages)
        if cached:
            provider.stats.cache_reads += 1
            provider.stats.cached_tokens += cached
        text = provider.override.reply_text
        return self._success(provider.model.model, messages, max_tokens, latency_ms, text, cached)

    def _success(
        self,
        model: str,
        messages: list[Any],
        max_tokens: int,
        latency_ms: float,
        text: str | None = None,
        cached_tokens: int = 0,
    ) -> web.Response:
        completion = min(self.completion_tokens, max_tokens)
        finish = "length" if max_tokens < self.completion_tokens else "stop"
        # A judge request gets a parsable score; no text: the canned reply.
        content = text or judge_reply(messages)
        prompt = estimate_prompt_tokens(messages)
        body = completion_body(
            model, prompt, completion, finish, content, min(cached_tokens, prompt)
        )
        headers = {"x-simulated-latency-ms": f"{latency_ms:.3f}"}
        return web.json_response(body, headers=headers)

    async def _embeddings(self, request: web.Request) -> web.Response:
        """``/v1/embeddings`` of a ``kind: embeddings`` model: the draw, faults and overrides
        of a chat call; a success is a vector per text (app/embedded/simulated/embeddings.py)."""
        provider = self._providers.get(request.match_info["provider"])
        if provider is None:
            return unknown_provider_response(request.match_info["provider"])
        if provider.model.kind != "embeddings":
            message = f"{provider.model.model} does not serve embeddings"
            body = error_body(message, "invalid_request_error", "model_not_found")
            return web.json_response(body, status=404)
        try:
            asked = parse_embeddings(await read_json_body(request))
        except RequestError as exc:
            return invalid_request_response(str(exc))
        return await self._in_slot(provider, lambda: self._embed(provider, asked))

    async def _embed(self, provider: ProviderState, asked: EmbeddingsAsked) -> web.Response:
        failed, latency_ms = await self._faults(provider, '{"data": [')
        if failed is not None:
            return failed
        provider.stats.ok += 1
        headers = {"x-simulated-latency-ms": f"{latency_ms:.3f}"}
        answer = embeddings_answer(provider.model.model, asked)
        return web.json_response(answer, headers=headers)

    async def _faults(
        self, provider: ProviderState, malformed_text: str, share: float = 1.0
    ) -> tuple[web.Response | None, float]:
        """One call's draw, waited out (``share`` of a success's latency: the rest is the
        caller's): its failure (an outage, a body cut at ``malformed_text``, a 429, a 503),
        or None and the latency of a success."""
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
            return server_error_response("simulated outage"), 0.0
        latency_ms = result.latency_ms * override.latency_factor
        if override.malformed:
            await self._sleep(latency_ms)
            malformed = web.Response(
                status=200, text=malformed_text, content_type="application/json"
            )
            return malformed, latency_ms
        if override.rate_limited or result.outcome is Outcome.RATE_LIMITED:
            provider.stats.rate_limited += 1
            await self._sleep(latency_ms * RATE_LIMIT_LATENCY_FRACTION)
            return self._rate_limited("simulated rate limit", override.retry_after_s), latency_ms
        await self._sleep(latency_ms * share)
        if result.outcome is Outcome.SERVER_ERROR:
            provider.stats.server_errors += 1
            return server_error_response("simulated upstream failure"), latency_ms
        return None, latency_ms

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
