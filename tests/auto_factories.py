"""Builders for the auto-router and affinity tests: a priced route, requests
accepted by ingest itself (features, prefix hash), a log whose answers read the cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from factories import T0, params
from log_harness import Log
from log_harness import replayed as replayed

from app.config.schema import RoutingConfig, parse_config
from app.contract import (
    AttemptFinished,
    Decision,
    Dispatch,
    RequestAccepted,
    StatusClass,
)
from app.routing.answers import at
from app.routing.policy import Policy
from bench.ingested import ingest

SYSTEM = "You are the support assistant of Example Corp. Answer politely and precisely."

#: Prices (USD per 1M input, output) and quality priors of the test route's models.
PROVIDERS: list[dict[str, Any]] = [
    {"id": "cheap", "in": 0.1, "out": 0.4, "models": [{"name": "small", "quality_prior": 0.72}]},
    {"id": "mid", "in": 1.0, "out": 4.0, "models": [{"name": "medium", "quality_prior": 0.86}]},
    {"id": "big", "in": 5.0, "out": 20.0, "models": [{"name": "large", "quality_prior": 0.95}]},
    # No price declared: unknown (a declared 0 would be free).
    {
        "id": "unpriced",
        "in": None,
        "out": None,
        "models": [{"name": "local", "quality_prior": 0.9}],
    },
    {
        "id": "pro",
        "in": 2.5,
        "out": 10.0,
        "models": [
            {"name": "pro-1", "quality_prior": 0.92},
            {"name": "pro-mini", "quality_prior": 0.8},
        ],
    },
]


def config(auto: dict[str, Any] | None = None, **route: Any) -> RoutingConfig:
    providers = [
        {
            "id": p["id"],
            "base_url": f"https://{p['id']}.example.test/v1",
            "api_key": "k",
            "cost_per_mtok_input": p["in"],
            "cost_per_mtok_output": p["out"],
            "cost_per_mtok_cached_input": None if p["in"] is None else p["in"] / 10,
            "models": p["models"],
        }
        for p in PROVIDERS
    ]
    chat: dict[str, Any] = {"providers": [p["id"] for p in PROVIDERS], **route}
    if auto is not None:
        chat["auto"] = auto
    return parse_config({"providers": providers, "routes": {"chat": chat}}, {})


def auto_policy(auto: dict[str, Any] | None = None, **route: Any) -> Policy:
    values = {"cb_failure_threshold": 5, "max_attempts": 3}
    return Policy(config({} if auto is None else auto, **route), params(**values))


def request(
    policy: Policy,
    n: int,
    user: str = "hello",
    *,
    t: float | None = None,
    model: str = "auto",
    system: str = SYSTEM,
    history: list[dict[str, str]] | None = None,
    session: str | None = None,
    **fields: Any,
) -> RequestAccepted:
    """Request ``r<n>`` at ``T0 + n`` (or ``t``), accepted by ingest."""
    messages = [{"role": "system", "content": system}, *(history or [])]
    messages.append({"role": "user", "content": user})
    body: dict[str, Any] = {"request_id": f"r{n}", "messages": messages, "model": model}
    if session is not None:
        body["session_id"] = session
    body.update(fields)
    accepted = ingest(body, n, at(T0 + n if t is None else t), policy.config)
    assert isinstance(accepted, RequestAccepted), accepted
    return accepted


def no_cache(_: Decision) -> int:
    return 0


@dataclass
class CacheLog(Log):
    """The harness's log whose successful answers report ``cached(decision)`` tokens read
    from the prompt cache (of 2,000 input tokens)."""

    cached: Callable[[Decision], int] = no_cache

    def finished(self, dispatch: Dispatch) -> AttemptFinished:
        event = super().finished(dispatch)
        ok = event.outcome.status_class is StatusClass.SUCCESS
        tokens = self.cached(dispatch.decision) if ok else 0
        outcome = event.outcome.model_copy(update={"tokens_in": 2000, "tokens_cached": tokens})
        return event.model_copy(update={"outcome": outcome})
