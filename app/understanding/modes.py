"""Routing modes, model-id suffixes and ``provider:model`` pinning
(docs/design.md#composite-score-modes-adaptive).

**Weights.** The bandit's tuning table gives the cost and latency bonus weights of
four objectives; the routing-policy rules add ``throughput``:

============  ====  =======  ==========  ============================================
mode          cost  latency  throughput  objective
============  ====  =======  ==========  ============================================
balanced      0.10  0.15     0           balance (the default)
price         0.30  0.05     0           minimise cost
latency       0.05  0.30     0           minimise latency
quality       0     0        0           maximise quality
throughput    0.05  0.05     0.30        ours: latency mode's shape, the 0.30 moved to
                                         observed output tokens/s, latency kept at 0.05
                                         since time to first token still matters
============  ====  =======  ==========  ============================================

The throughput bonus is ``weight · tps / (tps + 100)``: 0 at 0 tok/s, half the
weight at 100 tok/s (a typical hosted GPU deployment), 0.83 of it at 500 and
0.91 at 1 000 (wafer-scale and LPU providers). Unlike the linear, clamped cost
and latency bonuses it never saturates, so it still separates two fast
providers. Before any sample an arm is taken at 50 tok/s (as an arm is taken at
5 s of latency), and samples are folded with the latency EMA's 0.8/0.2 weights.

**Model ids.** A request's ``model`` is read as (:func:`parse_model_id`):

* ``chat`` — a route alias (absent: the default route);
* ``chat:nitro`` / ``chat:floor`` — the alias with a routing suffix: ``:nitro``
  forces ``throughput``, ``:floor`` forces ``price``;
* ``provider:model`` — any other id with a colon pins that deployment and
  disables fallback. Everything after the first colon is the canonical model
  id, suffixes included: ``openai:gpt-4.1:nitro`` pins model ``gpt-4.1:nitro``
  of provider ``openai`` and forces no mode (suffixes stay part of the canonical
  id, e.g. ``baseten:google/gemma-4-26b-a4b:free``).
  When ``alias:nitro`` is itself a configured deployment, the pin wins.

**Precedence**: a recognised suffix beats the request's
``routing.mode``, which beats the preset's mode, which beats the route's
(workspace) default; with none of them the mode is ``balanced``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from app.contract.mode import RoutingMode

DEFAULT_MODE = RoutingMode.BALANCED


@dataclass(frozen=True, slots=True)
class ModeWeights:
    cost: float
    latency: float
    throughput: float = 0.0


MODE_WEIGHTS: dict[RoutingMode, ModeWeights] = {
    RoutingMode.BALANCED: ModeWeights(cost=0.1, latency=0.15),
    RoutingMode.PRICE: ModeWeights(cost=0.3, latency=0.05),
    RoutingMode.LATENCY: ModeWeights(cost=0.05, latency=0.3),
    RoutingMode.QUALITY: ModeWeights(cost=0.0, latency=0.0),
    RoutingMode.THROUGHPUT: ModeWeights(cost=0.05, latency=0.05, throughput=0.3),
}

#: The model-id suffixes and the mode each forces.
SUFFIX_MODES: dict[str, RoutingMode] = {
    "nitro": RoutingMode.THROUGHPUT,
    "floor": RoutingMode.PRICE,
}

#: Output tokens/s at which the throughput bonus is half its weight.
THROUGHPUT_HALF_TPS = 100.0
#: Assumed throughput of an arm with no sample yet (as 5 s of latency is assumed).
INITIAL_TOKENS_PER_S = 50.0


def weights_for(mode: RoutingMode) -> ModeWeights:
    return MODE_WEIGHTS[mode]


def parse_mode(value: str) -> RoutingMode:
    """A mode name (``routing.mode``, a preset, a route default); ValueError naming the choices."""
    try:
        return RoutingMode(value.strip().lower())
    except ValueError:
        choices = ", ".join(m.value for m in RoutingMode)
        raise ValueError(f"unknown routing mode {value!r} (expected one of: {choices})") from None


def throughput_bonus(tokens_per_s: float, weight: float) -> float:
    """``weight · tps / (tps + 100)``: in ``[0, weight)``, increasing, half at 100 tok/s."""
    tps = max(0.0, tokens_per_s)
    return weight * tps / (tps + THROUGHPUT_HALF_TPS)


# --------------------------------------------------------------------------- model ids


@dataclass(frozen=True, slots=True)
class ModelRef:
    """What a request's ``model`` names."""

    raw: str | None
    kind: Literal["route", "pinned", "invalid"]
    #: The route alias (``kind == "route"``); None for the default route.
    route: str | None = None
    #: ``nitro`` / ``floor`` when the alias carried a routing suffix.
    suffix: str | None = None
    #: The pinned provider id and canonical model id (``kind == "pinned"``).
    provider: str | None = None
    model: str | None = None
    #: Why the id is invalid (``kind == "invalid"``).
    error: str | None = None

    @property
    def suffix_mode(self) -> RoutingMode | None:
        return SUFFIX_MODES[self.suffix] if self.suffix is not None else None

    @property
    def deployment(self) -> str | None:
        """``provider:model`` of a pinned id (as ``app.config.providers.deployment_id`` builds)."""
        if self.provider is None or self.model is None:
            return None
        return f"{self.provider}:{self.model}"


def parse_model_id(model: str | None, deployments: Collection[str] = ()) -> ModelRef:
    """Read a request's ``model`` (see the module doc). Pure and total: never raises.

    ``deployments`` (the configured ``provider:model`` ids) settle the one
    ambiguous form: ``x:nitro`` is a pin when ``x:nitro`` is configured.
    """
    if model is None or model == "":
        return ModelRef(raw=model, kind="route")
    if model != model.strip() or any(ch.isspace() for ch in model):
        return ModelRef(raw=model, kind="invalid", error="model id contains whitespace")
    head, colon, tail = model.partition(":")
    if not colon:
        return ModelRef(raw=model, kind="route", route=model)
    if tail in SUFFIX_MODES and model not in deployments and head:
        return ModelRef(raw=model, kind="route", route=head, suffix=tail)
    if not head:
        return ModelRef(raw=model, kind="invalid", error="pinned model id has no provider")
    if not tail:
        return ModelRef(raw=model, kind="invalid", error="pinned model id has no model")
    return ModelRef(raw=model, kind="pinned", provider=head, model=tail)


# --------------------------------------------------------------------------- precedence

ModeSource = Literal["suffix", "request", "preset", "route_default", "default"]


@dataclass(frozen=True, slots=True)
class ModeChoice:
    mode: RoutingMode
    #: Which setting decided it, for the decision trace.
    source: ModeSource


def effective_mode(
    suffix_mode: RoutingMode | None,
    request_mode: RoutingMode | None,
    preset_mode: RoutingMode | None,
    route_default: RoutingMode | None,
) -> ModeChoice:
    """Suffix > request ``routing.mode`` > preset > route (workspace) default."""
    ordered: tuple[tuple[RoutingMode | None, ModeSource], ...] = (
        (suffix_mode, "suffix"),
        (request_mode, "request"),
        (preset_mode, "preset"),
        (route_default, "route_default"),
    )
    for mode, source in ordered:
        if mode is not None:
            return ModeChoice(mode, source)
    return ModeChoice(DEFAULT_MODE, "default")
