"""Scenarios S1–S8 of ``switchyard bench quality``, on the reference providers
(docs/design.md#the-reference-providers; the scenarios: docs/benchmarks.md#bench-quality).

Every scenario lasts two hours of simulated time (``DURATION_S``); the arrival
rate is ``requests / DURATION_S``, so a smaller run is a sparser one, never a
shorter one: a 47-minute outage always lasts 47 minutes.

Acceptance (P(a user accepts a successful answer)) is not in the reference table; it
is derived from each model's MMLU-Pro score: ``round(MMLU-Pro/100 + 0.12, 2)``.
"The best" deployment is the one with the highest expected utility in a quiet
world (:func:`bench.sim.world.best_deployment`); with the reference table and the
utility's λs it is Gemini 2.5 Flash.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from app.config.providers import deployment_id
from app.config.schema import RoutingConfig
from app.embedded.simulated import SEED_003_MODELS, SimulatedModel, providers_config
from bench.sim.world import (
    AcceptanceStep,
    Incident,
    Joins,
    LatencyDrift,
    Outage,
    Scenario,
    Throttle,
    Truth,
    World,
    best_deployment,
)

ROUTE = "chat"
DURATION_S = 7200.0
#: MMLU-Pro score of each reference model.
MMLU_PRO = {
    "openai-gpt-4.1": 78.4,
    "anthropic-claude-sonnet-4.5": 79.1,
    "gemini-2.5-flash": 71.2,
    "deepseek-v3.2": 68.7,
}
#: S5: a faster, cheaper and better provider that joins after an hour.
NEWCOMER = SimulatedModel(
    "groq-llama-4-maverick", "llama-4-maverick", 220, 270, 400, 0.9980, 6000,
    0.20, 0.60, 400, 0.05, 270, 8_000,
)  # fmt: skip
NEWCOMER_ACCEPTANCE = 0.86
#: The 15 domains, each with a prompt its detector would classify.
DOMAIN_PROMPTS = {
    "math": "Calcule la dérivée de cette équation.",
    "coding": "Debug this python function and add a pytest.",
    "reasoning": "Explique pourquoi, step by step.",
    "image": "Génère une image d'un phare au crépuscule.",
    "voice": "Text to speech : lis ce paragraphe.",
    "transcription": "Transcrire cet enregistrement (speech to text).",
    "translation": "Traduis ce texte en anglais.",
    "vision": "Décris cette image et fais l'OCR du document.",
    "embedding": "Embed these sentences for semantic search.",
    "medical": "Diagnostic : quels symptômes chez ce patient ?",
    "finance": "Analyse l'EBITDA et le ROI de ce trading.",
    "science": "Explique cette réaction de chimie.",
    "classification": "Classifie ce message : spam ou non ?",
    "sentiment": "Quel est le sentiment de cet avis client ?",
    "legal": "Ce contrat est-il conforme au RGPD ?",
}
DEFAULT_PROMPT = "Réponds à cette question."
#: S7: acceptance of a domain's expert provider over its average, and of its specialised model.
EXPERT_BONUS = 0.06
SPECIALIST_BONUS = 0.03


def prompt_for(domain: str | None) -> str:
    return DEFAULT_PROMPT if domain is None else DOMAIN_PROMPTS[domain]


def seed_acceptance(provider_id: str) -> float:
    return round(MMLU_PRO[provider_id] / 100 + 0.12, 2)


def _base_truths() -> tuple[Truth, ...]:
    return tuple(Truth(m, seed_acceptance(m.provider_id)) for m in SEED_003_MODELS)


def _config(
    models: Sequence[SimulatedModel], extra_models: dict[str, list[Any]] | None = None
) -> RoutingConfig:
    urls = {m.provider_id: f"http://{m.provider_id}.sim.invalid/v1" for m in models}
    data = providers_config(urls, models, route=ROUTE)
    for entry in data["providers"]:
        entry["models"].extend((extra_models or {}).get(entry["id"], []))
    return RoutingConfig.model_validate(data)


def _quiet(truths: tuple[Truth, ...]) -> tuple[RoutingConfig, str]:
    config = _config([t.model for t in truths])
    return config, best_deployment(truths, config)


def s1() -> Scenario:
    truths = _base_truths()
    return Scenario(
        "S1",
        "stationary",
        "The four reference providers, nothing changes.",
        truths,
        _config([t.model for t in truths]),
    )


def s2() -> Scenario:
    truths = _base_truths()
    config, best = _quiet(truths)
    start, end = 1800.0, 1800.0 + 47 * 60
    return Scenario(
        "S2",
        "47-minute outage",
        f"{best} answers every call 503 at once from 0:30 to 1:17.",
        truths,
        config,
        changes=(Outage(best, start, end),),
        incident=Incident(best, start, end),
    )


def s3() -> Scenario:
    truths = _base_truths()
    config, best = _quiet(truths)
    return Scenario(
        "S3",
        "429 storm",
        f"{best} serves at most 25% of the arrival rate from 0:40 to 1:00 and answers "
        "the rest 429 with Retry-After.",
        truths,
        config,
        throttles=(Throttle(best, 2400.0, 3600.0, 0.25),),
    )


def s4() -> Scenario:
    truths = _base_truths()
    config, best = _quiet(truths)
    return Scenario(
        "S4",
        "latency drift",
        f"{best}'s latency grows linearly 1x to 4x from 0:30 to 1:30, then stays 4x.",
        truths,
        config,
        changes=(LatencyDrift(best, 1800.0, 5400.0, 4.0),),
    )


def s5() -> Scenario:
    truths = (*_base_truths(), Truth(NEWCOMER, NEWCOMER_ACCEPTANCE))
    newcomer = truths[-1].deployment
    return Scenario(
        "S5",
        "better provider joins",
        f"{newcomer} (p50 220 ms, $0.20/$0.60, acceptance 0.86) is configured from the "
        "start but refuses connections until 1:00.",
        truths,
        _config([t.model for t in truths]),
        changes=(Joins(newcomer, 3600.0),),
    )


_S6_PREFIXES = (
    "cerebras", "groq", "deepinfra", "together", "fireworks", "cohere",
    "perplexity", "ai21", "mistral", "openrouter", "huggingface", "mistral",
)  # fmt: skip


def _s6_models() -> list[tuple[SimulatedModel, float]]:
    """Twelve more providers, drawn once from a fixed generator (not the run's seed)."""
    rng = random.Random("switchyard-bench/S6")
    rows: list[tuple[SimulatedModel, float]] = []
    for index, prefix in enumerate(_S6_PREFIXES, start=1):
        p50 = round(rng.uniform(250, 1500))
        p95 = round(p50 * rng.uniform(1.12, 1.4))
        price_in = round(rng.uniform(0.1, 3.0), 2)
        price_out = round(price_in * rng.uniform(1.5, 5.0), 2)
        success = round(rng.uniform(0.985, 0.999), 4)
        model = SimulatedModel(
            f"{prefix}-m{index:02d}", f"m{index:02d}", p50, p95, round(p95 * 1.45), success,
            2000, price_in, price_out, 300, 0.05, p95, 10_000,
        )  # fmt: skip
        rows.append((model, round(rng.uniform(0.72, 0.88), 2)))
    return rows


def s6() -> Scenario:
    truths = (*_base_truths(), *(Truth(m, a) for m, a in _s6_models()))
    return Scenario(
        "S6",
        "16 providers",
        "The four reference providers plus twelve generated ones (p50 250-1500 ms, "
        "acceptance 0.72-0.88).",
        truths,
        _config([t.model for t in truths]),
    )


def s7() -> Scenario:
    rng = random.Random("switchyard-bench/S7")
    domains = tuple(DOMAIN_PROMPTS)
    general = _base_truths()
    by_domain: dict[str, dict[str, float]] = {t.deployment: {} for t in general}
    specialists: list[Truth] = []
    extra_models: dict[str, list[Any]] = {}
    for index, domain in enumerate(domains):
        expert = general[index % len(general)]
        for truth in general:
            delta = EXPERT_BONUS if truth is expert else rng.uniform(-0.12, 0.03)
            by_domain[truth.deployment][domain] = _clip(truth.acceptance + delta)
        special = replace(expert.model, model=f"{expert.model.model}-{domain}")
        value = _clip(by_domain[expert.deployment][domain] + SPECIALIST_BONUS)
        specialists.append(Truth(special, value, {domain: value}))
        extra_models.setdefault(expert.model.provider_id, []).append(
            {"name": special.model, "specialized": domain}
        )
    truths = tuple(
        Truth(t.model, round(sum(by_domain[t.deployment].values()) / len(domains), 4),
              by_domain[t.deployment])
        for t in general
    )  # fmt: skip
    return Scenario(
        "S7",
        "15 domains",
        "Requests spread evenly over the 15 domains (prompts the ingest's detector "
        "classifies); each domain has one expert provider (+0.06 acceptance; the others "
        "-0.12 to +0.03) with a specialised model (+0.03 more). The live router sends a "
        "domain's requests to its specialists only; the baselines "
        "see the default models; the oracle chooses among both.",
        (*truths, *specialists),
        _config([t.model for t in truths], extra_models),
        domains=domains,
    )


def _clip(value: float) -> float:
    return round(min(0.99, max(0.3, value)), 4)


def s8() -> Scenario:
    truths = _base_truths()
    config, best = _quiet(truths)
    return Scenario(
        "S8",
        "silent quality regression",
        f"{best}'s acceptance drops from 0.90 to 0.60 at 1:00; its calls still succeed.",
        truths,
        config,
        changes=(AcceptanceStep(best, 3600.0, 0.90, 0.60),),
    )


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "S1": s1, "S2": s2, "S3": s3, "S4": s4, "S5": s5, "S6": s6, "S7": s7, "S8": s8,
}  # fmt: skip


def build(scenario_id: str) -> Scenario:
    try:
        factory = SCENARIOS[scenario_id.upper()]
    except KeyError:
        raise KeyError(
            f"unknown scenario {scenario_id!r} (known: {', '.join(SCENARIOS)})"
        ) from None
    return with_quality_priors(factory())


def with_quality_priors(scenario: Scenario) -> Scenario:
    """The config an operator would write after an offline evaluation at t = 0.

    Every configured model gets ``quality_prior`` = its true acceptance at the start
    (the knowledge ``static_priority``'s ranking comes from). Only the ``adaptive``
    strategy reads it; ``ADAPTIVE_QUALITY_PRIORS=false`` runs it without.
    """
    world = World(scenario, 1.0)
    data = scenario.config.model_dump(mode="json")
    for provider in data["providers"]:
        for model in provider["models"]:
            deployment = deployment_id(provider["id"], model["name"])
            if deployment in world.truths:
                model["quality_prior"] = world.conditions(deployment, 0.0).acceptance
    return replace(scenario, config=RoutingConfig.model_validate(data))
