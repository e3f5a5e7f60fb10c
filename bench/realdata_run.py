"""One replay of a graded prompt file through the live router (``switchyard bench realdata``).

Each prompt is a request accepted by :func:`app.ingest.accept` and folded by the
live :class:`app.routing.driver.Driver` (the fold every user drives); the
attempt the router dispatches is answered with an ``AttemptFinished`` built by
the executor's own :func:`app.execution.outcome.build_outcome` and
:func:`~app.execution.outcome.feedback` from a successful call (tokens in from the
prompt's length, tokens out from the data's cost at the deployment's list
price), its ``cost_usd`` the data's cost for that model; a ``GradeApplied``
carrying the data's judge reward for the model that answered follows on a share
of the answers (``coverage``), ``0..max_delay`` requests later. Nothing is
re-implemented: only the world (the data) is simulated.

Deterministic: the prompt order is a permutation seeded by ``seed``; whether an
answer is graded and its delay come from a generator seeded by (seed, prompt),
the same for every strategy (common random numbers).
"""

from __future__ import annotations

import heapq
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from app.config.providers import ModelSpec, ProviderConfig, deployment_id
from app.config.schema import RouteConfig, RoutingConfig
from app.contract import (
    Dispatch,
    GradeApplied,
    RequestAccepted,
    RoutingLogEvent,
    StatusClass,
    derived_id,
)
from app.execution.outcome import CallResult, build_outcome, feedback
from app.routing.driver import Driver
from app.routing.params import RoutingParams
from app.routing.policy import Policy
from bench.ingested import admitted, ingest

ROUTE = "chat"
#: Epoch seconds of the first request (2026-01-01T00:00:00Z); one request a second.
ORIGIN = 1_767_225_600.0
LATENCY_MS = 800.0
#: Public list prices ($ per 1M input / output tokens) of the models the shared data
#: uses: the configured prices an operator would write. Any other model gets the cost
#: bonus's default figure, and the router learns its real cost from its outcomes.
LIST_PRICES: dict[str, tuple[float, float]] = {
    "meta-llama/llama-3.1-8b-instruct": (0.02, 0.05),
    "mistralai/mistral-large-2512": (0.5, 1.5),
    "google/gemini-2.5-pro": (1.25, 10.0),
}
DEFAULT_PRICE = (2.0, 2.0)


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    #: Per model id, in the file's order: judge reward and cost in USD.
    reward: dict[str, float]
    cost: dict[str, float]


def load(path: Path) -> list[Prompt]:
    prompts = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        row = json.loads(line)
        arms = row["arms"]
        prompts.append(
            Prompt(
                text=str(row["prompt"]),
                reward={m: float(a["reward"]) for m, a in arms.items()},
                cost={m: float(a["cost"]) for m, a in arms.items()},
            )
        )
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


def provider_id(model: str, index: int) -> str:
    """A provider id from a model id (``org/name`` -> ``org``), unique by position."""
    org = model.split("/")[0]
    clean = "".join(c if c.isalnum() or c in "._-" else "-" for c in org).strip("-._")
    return f"{clean or 'model'}-{index}"


def build_config(models: list[str], cost_target_usd: float | None = None) -> RoutingConfig:
    providers = []
    for index, model in enumerate(models):
        price_in, price_out = LIST_PRICES.get(model, DEFAULT_PRICE)
        providers.append(
            ProviderConfig(
                id=provider_id(model, index),
                base_url="http://127.0.0.1:9/v1",
                cost_per_mtok_input=price_in,
                cost_per_mtok_output=price_out,
                max_concurrency=1000,
                models=[ModelSpec(name=model)],
            )
        )
    route = RouteConfig(providers=[p.id for p in providers], cost_target_usd=cost_target_usd)
    return RoutingConfig(providers=providers, routes={ROUTE: route}, default_route=ROUTE)


def tokens_for(text: str, cost: float, provider: ProviderConfig) -> tuple[int, int]:
    """Tokens in (~4 characters each) and the tokens out the cost implies at list price."""
    tokens_in = max(1, len(text) // 4)
    rest = cost - tokens_in * provider.input_price / 1_000_000
    per_token_out = provider.output_price / 1_000_000
    tokens_out = max(1, round(rest / per_token_out)) if per_token_out > 0 and rest > 0 else 1
    return tokens_in, tokens_out


@dataclass(frozen=True, slots=True)
class Feedback:
    coverage: float
    max_delay: int

    @property
    def label(self) -> str:
        return f"{round(self.coverage * 100)}% of answers, delayed 0-{self.max_delay} requests"


@dataclass
class RunResult:
    quality: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    picks: dict[str, int] = field(default_factory=dict)
    decisions: int = 0


def order(count: int, seed: int) -> list[int]:
    indices = list(range(count))
    random.Random(f"switchyard-realdata/{seed}").shuffle(indices)
    return indices


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(ORIGIN + t, UTC)


class Replay:
    """The router, the clock and the grades still on their way, for one run."""

    def __init__(self, config: RoutingConfig, params: RoutingParams, models: list[str]) -> None:
        self.config = config
        self.policy = Policy(config, params)
        self.driver = Driver(lambda: self.policy)
        self.models = {deployment_id(p.id, p.default_model): p for p in config.providers}
        self.position = -1
        self.waiting: list[tuple[int, int, GradeApplied]] = []

    def fold(self, event: RoutingLogEvent) -> list[Dispatch]:
        self.position += 1
        return list(self.driver.fold(event, self.position).dispatches)

    def grades_due(self, index: int) -> None:
        while self.waiting and self.waiting[0][0] <= index:
            _, _, grade = heapq.heappop(self.waiting)
            self.fold(grade)

    def request(self, number: int, prompt: Prompt, t: float) -> RequestAccepted:
        body = {
            "request_id": f"realdata-{number}",
            "messages": [{"role": "user", "content": prompt.text}],
        }
        return admitted(ingest(body, number, _when(t), self.config))

    def answer(self, dispatch: Dispatch, prompt: Prompt, t: float) -> tuple[str, list[Dispatch]]:
        """Answer one attempt as the executor would, with the data's cost: the model and
        what the router dispatches next (nothing, unless it retries)."""
        provider = self.models[dispatch.decision.deployment]
        model = provider.default_model
        tokens_in, tokens_out = tokens_for(prompt.text, prompt.cost[model], provider)
        result = CallResult(
            status_class=StatusClass.SUCCESS,
            http_status=200,
            latency_ms=LATENCY_MS,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            finish_reason="stop",
            completion={"choices": [{"message": {"role": "assistant", "content": "ok"}}]},
        )
        built = build_outcome(dispatch, result, provider, occurred_at=_when(t), final=True)
        outcome = built.model_copy(update={"cost_usd": prompt.cost[model]})
        return model, self.fold(feedback(dispatch, outcome, result))

    def grade_later(self, dispatch: Dispatch, score: float, due: int) -> None:
        decision = dispatch.decision
        grade = GradeApplied(
            id=derived_id("grade", decision.request_id, "judge"),
            occurred_at=dispatch.occurred_at,
            request_id=decision.request_id,
            route=decision.route,
            deployment=decision.deployment,
            context=decision.context,
            source="judge",
            score=score,
            feedback_id=derived_id("feedback", decision.request_id, "judge"),
        )
        heapq.heappush(self.waiting, (due, self.position, grade))


def replay(
    prompts: list[Prompt],
    params: RoutingParams,
    grading: Feedback,
    seed: int,
    cost_target_usd: float | None = None,
) -> RunResult:
    """One strategy over every prompt, in the seed's order, from a cold start."""
    models = list(prompts[0].reward)
    run = Replay(build_config(models, cost_target_usd), params, models)
    result = RunResult(picks=dict.fromkeys(models, 0))
    for number, index in enumerate(order(len(prompts), seed)):
        prompt = prompts[index]
        run.grades_due(number)
        t = float(number)
        dispatches = run.fold(run.request(number, prompt, t))
        if len(dispatches) != 1:
            raise RuntimeError(f"request {number}: {len(dispatches)} dispatches")
        dispatch = dispatches[0]
        result.decisions += 1
        model, more = run.answer(dispatch, prompt, t + LATENCY_MS / 1000.0)
        if more:
            raise RuntimeError(f"request {number}: a retry after a success")
        result.picks[model] += 1
        result.quality.append(prompt.reward[model])
        result.cost.append(prompt.cost[model])
        draw = random.Random(f"switchyard-realdata/{seed}/{index}")
        if draw.random() < grading.coverage:
            run.grade_later(
                dispatch, prompt.reward[model], number + draw.randint(0, grading.max_delay)
            )
    return result
