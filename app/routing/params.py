"""The routing parameters the fold reads, and their environment names.

Defaults are explicit and the environment is never read here: the worker reads it
once at start (:func:`params_from_env`, through ``app.settings``) and writes the full
set into the policy document the log carries, so a replay folds with the parameters
the live router had, whatever the environment of the machine that replays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Strategy(StrEnum):
    UCB1 = "ucb1"
    THOMPSON = "thompson"
    #: The composite score: cost x (ewma_latency / p95_baseline)^2 x (1 + 10 x ewma_failure),
    #: lowest wins.
    COMPOSITE = "composite"
    #: Expected utility per attempt from config priors and time-discounted outcomes
    #: (app/routing/adaptive.py); the strategy ``switchyard bench quality`` recommends.
    ADAPTIVE = "adaptive"


class BreakerMode(StrEnum):
    #: Count failures, open at the threshold for CB_TIMEOUT_S.
    SEED000 = "seed000"
    #: Open for 30 s when the EWMA failure rate > 0.5 over >= 20 outcomes.
    EWMA = "ewma"


class RoutingParams(BaseModel):
    """The routing parameters: plain frozen values with explicit defaults. Each has the
    name of the environment variable that sets it where the process starts
    (:func:`params_from_env`, called by the settings, never by the fold), which is also
    the name a policy document carries it by."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    strategy: Strategy = Field(default=Strategy.UCB1, validation_alias="BANDIT_STRATEGY")
    exploration_bonus: float = Field(
        default=math.sqrt(2), ge=0.0, validation_alias="BANDIT_EXPLORATION_BONUS"
    )
    cost_weight: float = Field(default=0.1, ge=0.0, validation_alias="BANDIT_COST_WEIGHT")
    latency_weight: float = Field(default=0.15, ge=0.0, validation_alias="BANDIT_LATENCY_WEIGHT")
    cb_failure_threshold: int = Field(default=5, ge=1, validation_alias="CB_FAILURE_THRESHOLD")
    cb_timeout_s: float = Field(default=60.0, gt=0.0, validation_alias="CB_TIMEOUT_S")
    cb_half_open_max_calls: int = Field(default=3, ge=1, validation_alias="CB_HALF_OPEN_MAX_CALLS")
    max_attempts: int = Field(default=3, ge=1, le=10, validation_alias="SWITCHYARD_MAX_ATTEMPTS")
    cb_mode: BreakerMode = Field(default=BreakerMode.SEED000, validation_alias="CB_MODE")
    #: EWMA weight of the newest outcome, kept within 0.2-0.3 (docs/design.md#circuit-breaker).
    ewma_alpha: float = Field(default=0.3, ge=0.2, le=0.3, validation_alias="EWMA_ALPHA")
    ewma_open_threshold: float = Field(
        default=0.5, gt=0.0, lt=1.0, validation_alias="CB_EWMA_THRESHOLD"
    )
    ewma_min_observations: int = Field(
        default=20, ge=1, validation_alias="CB_EWMA_MIN_OBSERVATIONS"
    )
    ewma_open_s: float = Field(default=30.0, gt=0.0, validation_alias="CB_EWMA_OPEN_S")
    #: Base of the exponential backoff between attempts.
    retry_backoff_s: float = Field(
        default=0.15, ge=0.0, validation_alias="SWITCHYARD_RETRY_BACKOFF_S"
    )
    #: A request not answered this long after it was accepted gets a deadline error.
    request_deadline_s: float = Field(
        default=120.0, gt=0.0, validation_alias="SWITCHYARD_REQUEST_DEADLINE_S"
    )
    #: Attempts that may wait per route when every candidate is saturated, open or
    #: cooling down (beyond: answered ``no_deployment_available`` at once).
    max_parked: int = Field(default=256, ge=0, validation_alias="SWITCHYARD_MAX_PARKED")
    #: Longest wait between two looks for a deployment (the backoff doubles up to it).
    max_park_wait_s: float = Field(
        default=2.0, gt=0.0, validation_alias="SWITCHYARD_MAX_PARK_WAIT_S"
    )
    # -- the ``adaptive`` strategy (app/routing/adaptive.py). An attempt is worth
    # p x (q - cost_usd / ADAPTIVE_ANSWER_VALUE_USD) - ADAPTIVE_WAIT_COST_PER_S x latency_s
    # answers: p its success rate, q the acceptance of its answer.
    #: What one accepted answer is worth, in dollars (spending this much cancels it).
    adaptive_answer_value_usd: float = Field(
        default=0.05, gt=0.0, validation_alias="ADAPTIVE_ANSWER_VALUE_USD"
    )
    #: Share of an answer's value lost per second of latency (0.1: ten seconds cost one).
    adaptive_wait_cost_per_s: float = Field(
        default=0.1, ge=0.0, validation_alias="ADAPTIVE_WAIT_COST_PER_S"
    )
    #: Half-life of the slow memory (success rate, acceptance): low noise, slow to follow.
    adaptive_half_life_s: float = Field(
        default=3600.0, gt=0.0, validation_alias="ADAPTIVE_HALF_LIFE_S"
    )
    #: Half-life of the fast memory: latency, and the change test against the slow one.
    adaptive_fast_half_life_s: float = Field(
        default=120.0, gt=0.0, validation_alias="ADAPTIVE_FAST_HALF_LIFE_S"
    )
    #: A rate (acceptance, success) keeps its prior until the outcomes contradict it by
    #: more than this many standard errors, and the slow memory restarts from the fast one
    #: when they differ by as much (each test needs ADAPTIVE_CHANGE_MIN_OUTCOMES outcomes).
    adaptive_change_sigmas: float = Field(
        default=4.0, gt=0.0, validation_alias="ADAPTIVE_CHANGE_SIGMAS"
    )
    adaptive_change_min_outcomes: float = Field(
        default=20.0, ge=1.0, validation_alias="ADAPTIVE_CHANGE_MIN_OUTCOMES"
    )
    #: Pseudo-answers behind the latency prior (the configured p95 baseline).
    adaptive_latency_prior_weight: float = Field(
        default=5.0, ge=0.0, validation_alias="ADAPTIVE_LATENCY_PRIOR_WEIGHT"
    )
    #: Start from the config's ``quality_prior``; off: every deployment starts at the default.
    adaptive_quality_priors: bool = Field(default=True, validation_alias="ADAPTIVE_QUALITY_PRIORS")
    adaptive_default_quality: float = Field(
        default=0.8, ge=0.0, le=1.0, validation_alias="ADAPTIVE_DEFAULT_QUALITY"
    )
    #: Success rate assumed before any outcome.
    adaptive_prior_success: float = Field(
        default=0.99, ge=0.0, le=1.0, validation_alias="ADAPTIVE_PRIOR_SUCCESS"
    )
    #: Bonus for thin recent evidence: ``ADAPTIVE_EXPLORATION / sqrt(1 + recent answers)``.
    adaptive_exploration: float = Field(
        default=0.005, ge=0.0, validation_alias="ADAPTIVE_EXPLORATION"
    )
    # -- quality grades, real cost, context and pacing (app/routing/estimates.py).
    #: Thompson's Beta update from a grade: fractional (alpha += score, beta += 1 - score)
    #: instead of a success when score >= 0.5. Traced in the algorithm version.
    thompson_fractional: bool = Field(default=False, validation_alias="THOMPSON_FRACTIONAL")
    #: Optimism on graded quality: the bound is mean + this x sd / sqrt(evidence).
    quality_exploration: float = Field(default=2.0, ge=0.0, validation_alias="QUALITY_EXPLORATION")
    #: Spread of grades assumed before a deployment has any (worth two grades).
    quality_prior_sd: float = Field(
        default=0.25, gt=0.0, le=1.0, validation_alias="QUALITY_PRIOR_SD"
    )
    #: Learn per context bucket (off: every request in one bucket).
    context_learning: bool = Field(default=True, validation_alias="CONTEXT_LEARNING")
    #: Grades a bucket needs before its own estimate is used (else a coarser bucket's).
    context_min_grades: float = Field(default=20.0, ge=1.0, validation_alias="CONTEXT_MIN_GRADES")
    #: Pseudo-grades of the coarser bucket's mean in a bucket's estimate.
    context_prior_weight: float = Field(
        default=10.0, ge=0.0, validation_alias="CONTEXT_PRIOR_WEIGHT"
    )
    #: Context buckets kept per deployment (the least used go first).
    context_max_keys: int = Field(default=64, ge=1, validation_alias="CONTEXT_MAX_KEYS")
    #: Step of the budget pacer's dual update, per request, in quality per target-cost.
    pacer_step: float = Field(default=0.005, gt=0.0, validation_alias="PACER_STEP")
    #: Lowest multiplier: below 0 the pacer spends up to the target too (the target is
    #: held both ways); 0 makes the target a ceiling only.
    pacer_floor: float = Field(default=-1.0, le=0.0, validation_alias="PACER_FLOOR")


def env_names() -> dict[str, str]:
    """Each parameter's environment name, by field name."""
    names = {}
    for name, info in RoutingParams.model_fields.items():
        alias = info.validation_alias
        names[name] = alias if isinstance(alias, str) else name
    return names


def params_from_env(environ: Mapping[str, str]) -> RoutingParams:
    """The parameters ``environ`` sets (by their environment names), defaults for the rest."""
    known = set(env_names().values())
    return RoutingParams.model_validate({k: v for k, v in environ.items() if k in known})
