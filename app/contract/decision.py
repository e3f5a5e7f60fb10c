"""A decision: which deployment an attempt goes to, and why (``llm.decisions``). No prompt
text: the candidates with their scores and factor contributions, the exclusions, the
rules and settings that chose, and the traces of dynamic routes and the auto router."""

from __future__ import annotations

from typing import Literal

from app.contract.auto import AutoTrace
from app.contract.base import Envelope, Frozen
from app.contract.cache import CacheTrace
from app.contract.dynamic import DynamicTrace


class Candidate(Frozen):
    deployment: str
    #: None for an arm never tried, which is picked before any score.
    score: float | None
    #: Per-factor contributions; for UCB1 they add up to ``score``.
    factors: dict[str, float]


class Exclusion(Frozen):
    deployment: str
    reason: str


class Decision(Envelope):
    """Which deployment an attempt goes to, and why. No prompt text."""

    type: Literal["routing.decision"] = "routing.decision"
    request_id: str
    attempt: int
    route: str
    deployment: str
    provider: str
    model: str
    strategy: str
    algorithm_version: str
    candidates: list[Candidate]
    excluded: list[Exclusion]
    config_hash: str
    #: The policy version in force on the route (0: none from the policy topic).
    policy_version: int = 0
    #: The dynamic route's path and target, when one applied.
    dynamic: DynamicTrace | None = None
    #: Routing-log offset of the event this decision was computed at.
    state_version: int
    propensity: float
    #: Why the chosen deployment won: "score", "untried_first", "half_open_probe",
    #: "retry_same_deployment" (a retry of the deployment that failed), "auto", "affinity",
    #: "cache" (answered from the route's response cache: no provider is called).
    selection_rule: str = "score"
    #: The detected domain, and how it narrowed the candidates
    #: (``specialists``, ``fallback_generalists``, ``no_domain``, ``all_providers``, ``pinned``).
    domain: str | None = None
    candidate_filter: str = "no_domain"
    #: The routing mode and which setting chose it.
    mode: str = "balanced"
    mode_source: str = "default"
    #: The request's context key (``tenant|domain|length|code``, app/routing/
    #: context.py), the bucket the chosen deployment's estimate came from (``*``: none
    #: finer had enough evidence) and how coarse it is (0: the finest).
    context: str | None = None
    context_level: str | None = None
    context_depth: int | None = None
    #: The budget pacer's cost multiplier and target ($ per request) when one applies.
    pacer_multiplier: float | None = None
    cost_target_usd: float | None = None
    #: The auto router's trace, when the request asked for ``model: "auto"``.
    auto: AutoTrace | None = None
    #: The affinity pin followed (``session`` or ``context``) when ``selection_rule`` is
    #: ``affinity``.
    affinity: str | None = None
    #: The response cache's hit (``selection_rule`` ``cache``): the source it reuses.
    cache: CacheTrace | None = None
    prompt_sha256: str
    prompt_chars: int
