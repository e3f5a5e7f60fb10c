"""What the auto router decided for a request, as decisions carry it.

Labels, numbers and deployment ids only: never request or response content.
"""

from __future__ import annotations

from pydantic import Field

from app.contract.base import Frozen


class AutoTrace(Frozen):
    """The classification, the rules applied and the ranking behind an auto decision.

    The ranked candidates' scores and factor contributions are the decision's
    ``candidates``; deployments left out (price caps, patterns, capability floor,
    breakers ...) are its ``excluded``, each with its reason.
    """

    #: ``auto-router/N``: the classifier's, the floor's and the scoring's version.
    algorithm_version: str
    #: ``local`` (the deterministic classifier) or ``classifier`` (a child request).
    classifier: str = "local"
    #: Share of each workload class (code, reasoning, tool_use, structured_output,
    #: translation, summary, general), summing to 1; ``workload`` the largest.
    breakdown: dict[str, float] = Field(default_factory=dict)
    workload: str = "general"
    complexity: float = 0.0
    confidence: float = 0.0
    #: The route's settings in force (the request cannot change them).
    objective: str = "balanced"
    spend_profile: str = "standard"
    max_input_usd_per_mtok: float | None = None
    max_output_usd_per_mtok: float | None = None
    #: Capability a model needed (complexity's floor plus the margin); relaxed to the
    #: best capability available when no model reached it.
    capability_floor: float = 0.0
    floor_relaxed: bool = False
    #: The deployment and model chosen, then the rest of the ranking in fallback order.
    chosen: str = ""
    model: str = ""
    fallbacks: list[str] = Field(default_factory=list)
    #: Per ranked deployment: the factor inputs (capability, reliability, latency_s,
    #: cost_usd) its score was computed from.
    inputs: dict[str, dict[str, float]] = Field(default_factory=dict)
    #: Set when a fixed model bypassed the auto router (a dynamic route's model node).
    substituted_by: str | None = None
