"""The world of ``switchyard bench affinity``: conversations, and providers whose prompt
caches report cached tokens only for a prefix they saw recently.

Pure and in-process: every request is accepted by :func:`app.ingest.accept` and folded
by the one :class:`app.routing.driver.Driver`; every attempt is answered with an
``AttemptFinished`` built by the executor's own :func:`app.execution.outcome.build_outcome`
and :func:`~app.execution.outcome.feedback` (so its cost is the executor's: cached input at
the cached price). Only the providers are simulated.

A provider's cache is the simulated providers' (app/embedded/simulated/prompt_cache.py):
every message-boundary prefix of the prompts it served, for ``TTL_S`` after its last use
(a read refreshes it, as OpenAI's and Anthropic's do); a call reads the longest fresh
prefix, if it is at least ``MIN_CACHED_TOKENS`` long. A conversation's turn is a *history
hit* when the tokens read cover its whole previous turn's prompt: the provider held the
conversation.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.config.schema import RoutingConfig, parse_config
from app.contract import (
    Decision,
    Dispatch,
    RoutingLogEvent,
    StatusClass,
)
from app.embedded.simulated.prompt_cache import PromptCache
from app.execution.outcome import CallResult, build_outcome, feedback, is_final
from app.routing.affinity import SESSION
from app.routing.driver import Driver
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from app.routing.state import BreakerPhase
from bench.ingested import admitted, ingest

ORIGIN = 1_767_225_600.0  # 2026-01-01T00:00:00Z
CHARS_PER_TOKEN = 4
LATENCY_S = 0.8
#: Anthropic-like list prices (USD per 1M tokens): input, cached input, output.
PRICE_IN, PRICE_CACHED, PRICE_OUT = 3.0, 0.3, 15.0
ANSWER = {"choices": [{"message": {"role": "assistant", "content": "ok"}}], "usage": {}}
WORDS = (
    "route",
    "cache",
    "token",
    "queue",
    "partition",
    "broker",
    "replay",
    "session",
    "provider",
    "model",
)


def build_config(deployments: int, affinity: bool) -> RoutingConfig:
    providers = [
        {
            "id": f"p{i}",
            "base_url": f"https://p{i}.example.test/v1",
            "cost_per_mtok_input": PRICE_IN,
            "cost_per_mtok_cached_input": PRICE_CACHED,
            "cost_per_mtok_output": PRICE_OUT,
            "max_concurrency": 1000,
            "models": [{"name": "chat-model"}],
        }
        for i in range(deployments)
    ]
    route = {"providers": [p["id"] for p in providers], "affinity": {"enabled": affinity}}
    return parse_config({"providers": providers, "routes": {"chat": route}}, {})


def filler(rng: random.Random, chars: int) -> str:
    text: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        text.append(word)
        size += len(word) + 1
    return " ".join(text)


def tokens(text: str) -> int:
    return max(1, len(text) // CHARS_PER_TOKEN)


@dataclass
class Conversation:
    number: int
    turns: int
    session: str | None
    messages: list[dict[str, str]]
    turn: int = 0
    #: Tokens of the previous turn's prompt (a history hit must read them all).
    previous_tokens: int = 0


@dataclass
class Stats:
    turns: int = 0
    history_turns: int = 0
    history_hits: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    attempts: int = 0
    failed_attempts: int = 0
    errors: int = 0
    rules: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    decisions: list[Decision] = field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        return self.history_hits / self.history_turns if self.history_turns else 0.0


@dataclass
class World:
    config: RoutingConfig
    seed: int
    #: Deployment -> simulated time from which every call fails (503).
    failing: dict[str, float] = field(default_factory=dict)
    params: RoutingParams = field(default_factory=RoutingParams)
    stats: Stats = field(default_factory=Stats)
    talks: dict[str, Conversation] = field(default_factory=dict)
    #: Per failing deployment: when its breaker opened, and the sessions pinned to it then.
    open_at: dict[str, float] = field(default_factory=dict)
    pinned_at_open: dict[str, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.policy = Policy(self.config, self.params)
        self.driver = Driver(lambda: self.policy)
        self.caches: dict[str, PromptCache] = defaultdict(PromptCache)
        self.events: dict[int, RoutingLogEvent] = {}
        self.position = -1
        self.offset = -1
        self.queue: list[tuple[float, int, str, Any]] = []
        self.order = 0
        self.rng = random.Random(f"switchyard-affinity/{self.seed}")

    # ----------------------------------------------------------------- the loop

    def schedule(self, when: float, kind: str, payload: Any) -> None:
        self.order += 1
        heapq.heappush(self.queue, (when, self.order, kind, payload))

    def run(self) -> Stats:
        while self.queue:
            now, _, kind, payload = heapq.heappop(self.queue)
            if kind == "turn":
                self._turn(payload, now)
            else:
                self._answer(payload, now)
        return self.stats

    def fold(self, event: RoutingLogEvent) -> None:
        self.position += 1
        self.events[self.position] = event
        step = self.driver.fold(event, self.position, self.events)
        for dispatch in step.dispatches:
            self.stats.decisions.append(dispatch.decision)
            self.stats.rules[dispatch.decision.selection_rule] += 1
            start = max(dispatch.not_before - ORIGIN, _seconds(event.occurred_at))
            self.schedule(start + LATENCY_S, "answer", dispatch)
        for response in step.responses:
            self._answered(response.request_id, response.status == "ok")
        self._note_breakers(_seconds(event.occurred_at))

    # ----------------------------------------------------------------- turns and answers

    def _turn(self, talk: Conversation, now: float) -> None:
        talk.turn += 1
        user = f"[c{talk.number} t{talk.turn}] " + filler(self.rng, 300)
        talk.messages.append({"role": "user", "content": user})
        body: dict[str, Any] = {
            "request_id": f"c{talk.number}-t{talk.turn}",
            "messages": talk.messages,
            "model": "chat",
        }
        if talk.session is not None:
            body["session_id"] = talk.session
        self.offset += 1
        accepted = admitted(ingest(body, self.offset, _at(now), self.config))
        self.talks[body["request_id"]] = talk
        self.fold(accepted)

    def _answer(self, dispatch: Dispatch, now: float) -> None:
        decision = dispatch.decision
        talk = self.talks[decision.request_id]
        prefixes = _prefixes(dispatch.accepted.request.messages)
        down = now >= self.failing.get(decision.deployment, float("inf"))
        self.stats.attempts += 1
        if down:
            self.stats.failed_attempts += 1
            result = CallResult(StatusClass.SERVER_ERROR, 503, LATENCY_S * 1000, error="503")
        else:
            read = self.caches[decision.deployment].read(prefixes, now)
            answer = filler(self.rng, 1200)
            result = CallResult(
                StatusClass.SUCCESS,
                200,
                LATENCY_S * 1000,
                tokens_in=prefixes[-1][1],
                tokens_out=tokens(answer),
                tokens_cached=read,
                finish_reason="stop",
                completion=ANSWER,
            )
            self._count(talk, result)
            talk.messages.append({"role": "assistant", "content": answer})
        provider = self.config.provider_by_id[decision.provider]
        final = is_final(dispatch, result)
        outcome = build_outcome(dispatch, result, provider, occurred_at=_at(now), final=final)
        self.stats.cost_usd += outcome.cost_usd
        self.fold(feedback(dispatch, outcome, result))

    def _count(self, talk: Conversation, result: CallResult) -> None:
        stats = self.stats
        stats.turns += 1
        stats.input_tokens += result.tokens_in
        stats.cached_tokens += result.tokens_cached
        if talk.turn > 1:
            stats.history_turns += 1
            stats.history_hits += result.tokens_cached >= talk.previous_tokens
        talk.previous_tokens = result.tokens_in

    def _answered(self, request_id: str, ok: bool) -> None:
        talk = self.talks[request_id]
        if not ok:
            self.stats.errors += 1
            talk.messages.pop()  # the user asks again in the next turn
        if talk.turn < talk.turns:
            gap = self.rng.uniform(20.0, 120.0)
            self.schedule(self.clock + gap, "turn", talk)

    def _note_breakers(self, now: float) -> None:
        if "chat" not in self.driver.states:
            return
        state = self.driver.route_state("chat")
        for deployment, arm in state.arms.items():
            if arm.breaker.state is BreakerPhase.OPEN and deployment not in self.open_at:
                self.open_at[deployment] = now
                self.pinned_at_open[deployment] = {
                    key
                    for key, pin in state.affinity.items()
                    if key.startswith(SESSION)
                    and pin.deployment == deployment
                    and pin.until > state.clock
                }

    @property
    def clock(self) -> float:
        state = self.driver.states.get("chat")
        return (state.clock - ORIGIN) if state is not None else 0.0


def _prefixes(messages: Any) -> list[tuple[str, int]]:
    """(hash, cumulative tokens) of each message-boundary prefix of a prompt."""
    digest = hashlib.sha256()
    found = []
    size = 0
    for message in messages:
        text = message.content if isinstance(message.content, str) else ""
        digest.update(f"{message.role}\x1f{text}\x1e".encode())
        size += tokens(text)
        found.append((digest.copy().hexdigest(), size))
    return found


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(ORIGIN + seconds, UTC)


def _seconds(when: datetime) -> float:
    return when.timestamp() - ORIGIN
