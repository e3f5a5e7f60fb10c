"""The local model in ``providers.yaml``, and on the embedded stack (``--local-model``).

* :func:`with_local_model`: the provider ``local`` (free, ``max_concurrency`` = its
  llama.cpp slots) first on the default route, with ``local_first`` (routing step
  4): asked first, its answer kept when its confidence reaches the threshold.
* :func:`with_local_judge`: the local model as the route's judge (app/grades/judge.py). A
  135M model does not follow the judge's ``SCORE: x`` instruction, so the judge is a
  second server held to that format by a llama.cpp grammar (:data:`SCORE_GRAMMAR`):
  its replies always parse; what its grades are worth is another matter
  (docs/operations.md, "Local model").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import yaml

from app.embedded.local_model import (
    MODEL_NAME,
    PROVIDER_ID,
    LocalModelError,
    LocalModelOptions,
    LocalModelServer,
)

if TYPE_CHECKING:
    from app.embedded.simulated import SimulatedProviders

JUDGE_PROVIDER_ID: Final = "local-judge"
JUDGE_ROUTE: Final = "judge"
SCORE_GRAMMAR: Final = 'root ::= "SCORE: " ("0" | "1" | "0." [0-9])'
DEFAULT_JUDGE_RUBRIC: Final = "A good answer is correct, on topic and concise."


def provider_entry(
    base_url: str, options: LocalModelOptions, provider_id: str = PROVIDER_ID
) -> dict[str, Any]:
    """The local model's providers.yaml entry: free, as many calls at once as it has slots."""
    return {
        "id": provider_id,
        "base_url": base_url,
        "cost_per_mtok_input": 0.0,
        "cost_per_mtok_output": 0.0,
        "cost_per_mtok": 0.0,
        "max_concurrency": options.parallel,
        "p95_latency_baseline_ms": 3000.0,
        "timeout_ms": 60_000,
        "models": [{"name": MODEL_NAME}],
    }


def with_local_model(
    providers_yaml: str,
    server: LocalModelServer,
    *,
    threshold: float = 0.75,
    route: str | None = None,
) -> str:
    """``providers_yaml`` plus the local model, asked first on ``route`` (default route)."""
    config = _load(providers_yaml)
    config["providers"].append(provider_entry(server.base_url, server.options))
    name = route or config.get("default_route", "chat")
    routes = config.setdefault("routes", {})
    entry = routes.setdefault(name, {"providers": [p["id"] for p in config["providers"][:-1]]})
    entry["providers"] = [PROVIDER_ID, *entry["providers"]]
    entry["local_first"] = {"provider": PROVIDER_ID, "threshold": threshold}
    return _dump(config)


def with_local_judge(
    providers_yaml: str,
    judge: LocalModelServer,
    *,
    sample_rate: float,
    route: str | None = None,
    rubric: str = DEFAULT_JUDGE_RUBRIC,
) -> str:
    """``providers_yaml`` plus the local model as ``route``'s judge (app/grades/judge.py).

    The judge is its own server (held to ``SCORE: x`` by :data:`SCORE_GRAMMAR`), the
    provider ``local-judge`` on a route of its own (a judge is pinned, and pins are
    routed), so the answering server stays free to answer anything.
    """
    config = _load(providers_yaml)
    config["providers"].append(provider_entry(judge.base_url, judge.options, JUDGE_PROVIDER_ID))
    name = route or config.get("default_route", "chat")
    routes = config.setdefault("routes", {})
    routes.setdefault(name, {"providers": [p["id"] for p in config["providers"][:-1]]})
    routes[JUDGE_ROUTE] = {"providers": [JUDGE_PROVIDER_ID]}
    routes[name]["judge"] = {
        "deployment": f"{JUDGE_PROVIDER_ID}:{MODEL_NAME}",
        "sample_rate": sample_rate,
        "rubric": rubric,
    }
    return _dump(config)


def judge_options(options: LocalModelOptions) -> LocalModelOptions:
    """The judge server's options: one slot, a few tokens, held to the score grammar."""
    return LocalModelOptions(
        threads=options.threads,
        parallel=1,
        ctx_per_slot=options.ctx_per_slot,
        max_tokens=8,
        seed=options.seed,
        startup_timeout_s=options.startup_timeout_s,
        grammar=SCORE_GRAMMAR,
    )


def _load(providers_yaml: str) -> dict[str, Any]:
    config = yaml.safe_load(providers_yaml)
    if not isinstance(config, dict) or not isinstance(config.get("providers"), list):
        raise LocalModelError("providers.yaml has no providers list to add the local model to")
    return config


def _dump(config: dict[str, Any]) -> str:
    return str(yaml.safe_dump(config, sort_keys=False))


# --------------------------------------------------------------------------- on the stack


@dataclass(frozen=True, slots=True)
class LocalModelChoice:
    """``--local-model``: the confidence to keep a local answer at, and the judge."""

    threshold: float = 0.75
    #: Share of the default route's answers the local model grades (0: no judge).
    judge_sample_rate: float = 0.0
    options: LocalModelOptions = field(default_factory=LocalModelOptions)


def local_stack(
    choice: LocalModelChoice,
) -> tuple[list[LocalModelServer], Callable[[SimulatedProviders], str]]:
    """The servers for ``EmbeddedStack(local_models=...)`` and its ``providers_yaml``:
    the simulated providers, the local model first, and its judge when asked for."""
    from app.embedded.simulated import demo_providers_yaml

    answering = LocalModelServer(choice.options)
    judge = None
    if choice.judge_sample_rate > 0:
        judge = LocalModelServer(judge_options(choice.options))

    def providers_yaml(sim: SimulatedProviders) -> str:
        text = with_local_model(demo_providers_yaml(sim), answering, threshold=choice.threshold)
        if judge is not None:
            text = with_local_judge(text, judge, sample_rate=choice.judge_sample_rate)
        return text

    return [answering, *([judge] if judge else [])], providers_yaml
