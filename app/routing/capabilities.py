"""What a request needs of a model, and the deployments that cannot give it.

An embeddings request (``operation: embeddings``) needs a model declared ``kind:
embeddings``, whatever else is declared, and a chat request one that is not: the others
are excluded as ``lacks_embeddings`` and ``lacks_chat``. An embeddings request's texts
are embedded one by one, so its fit to a context window is its longest text's.

A request needs the input kinds its messages carry (images, audio), tool calling when
it has ``tools``, structured output when its ``response_format`` is a JSON schema, and
room for its prompt and answer: about a token per four characters of prompt, plus its
``max_tokens``. A model declares what it has in ``providers.yaml`` (``modalities``,
``context_window``, ``max_output_tokens``); a model that declares nothing is taken to
serve anything, so undeclared configurations route as before. A deployment that
refused a prompt as longer than its window (``context_length_exceeded``) is not sent
one as large again (:func:`learn_window`, in the route's state). A deployment that
cannot serve the request is excluded before selection with the reason traced; a
request no candidate can serve is refused with a 400 before any call.

Pure: the request as accepted and the policy in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

from app.config.providers import ModelSpec
from app.contract import ErrorBody, Exclusion, RequestAccepted
from app.routing.policy import Arm, Policy
from app.routing.state import ArmState, RouteState, evolve_arm

#: Characters of prompt per token, for the fit to a context window (a safe side:
#: English runs about four characters a token, code and other scripts fewer).
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class Needs:
    """What a request needs of the model that answers it."""

    #: Input kinds beyond text (``image``, ``audio``), ``tools``, ``json_schema``.
    modalities: frozenset[str]
    prompt_tokens: int
    max_tokens: int | None
    #: An embeddings request (a model of ``kind: embeddings``), else a chat completion.
    embeddings: bool = False

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + (self.max_tokens or 0)


def needs_of(accepted: RequestAccepted) -> Needs:
    request = accepted.request
    if request.is_embeddings:
        longest = max((len(text) for text in request.input or ()), default=0)
        return Needs(frozenset(), -(-longest // CHARS_PER_TOKEN), None, embeddings=True)
    kinds = set(accepted.features.input_modalities) if accepted.features else set()
    kinds.discard("text")
    if request.tools:
        kinds.add("tools")
    response_format = request.response_format or {}
    if response_format.get("type") == "json_schema":
        kinds.add("json_schema")
    prompt_tokens = -(-accepted.prompt_chars // CHARS_PER_TOKEN)
    return Needs(frozenset(kinds), prompt_tokens, request.max_tokens)


def lacking(spec: ModelSpec | None, needs: Needs) -> str | None:
    """Why the model cannot serve ``needs`` (None: it can, or declares nothing)."""
    embeddings_model = spec is not None and spec.kind == "embeddings"
    if needs.embeddings != embeddings_model:
        return "lacks_embeddings" if needs.embeddings else "lacks_chat"
    if spec is None:
        return None
    if spec.modalities is not None:
        for kind in sorted(needs.modalities):
            if kind not in spec.modalities:
                return f"lacks_{kind}"
    if spec.max_output_tokens is not None and (needs.max_tokens or 0) > spec.max_output_tokens:
        return "max_output_too_small"
    if spec.context_window is not None and needs.tokens > spec.context_window:
        return "context_window_too_small"
    return None


def model_spec(arm: Arm) -> ModelSpec | None:
    return next((m for m in arm.provider.models if m.name == arm.model), None)


def any_declared(policy: Policy) -> bool:
    """Whether any model of the policy declares a capability (else nothing to check)."""
    key = ("capabilities_declared",)
    found = policy.memo.get(key)
    if found is None:
        found = policy.memo[key] = any(
            m.modalities is not None
            or m.context_window is not None
            or m.max_output_tokens
            or m.kind == "embeddings"
            for p in policy.config.providers
            for m in p.models
        )
    return cast(bool, found)


def unable(arm: Arm, accepted: RequestAccepted, policy: Policy) -> str | None:
    """Why ``arm`` cannot serve the request (None: it can)."""
    if not any_declared(policy) and not accepted.request.is_embeddings:
        return None
    return lacking(model_spec(arm), needs_of(accepted))


def split_capable(
    arms: Iterable[Arm], accepted: RequestAccepted, policy: Policy, state: RouteState
) -> tuple[list[Arm], list[Exclusion]]:
    """The arms that can serve the request, and an exclusion with the reason for each
    of the others (every arm kept, none excluded, when no model declares anything and
    none refused a prompt as too long)."""
    arms = list(arms)
    declared = any_declared(policy) or accepted.request.is_embeddings
    refused = {a.deployment: state.arm(a.deployment).refused_tokens for a in arms}
    if not declared and not any(refused.values()):
        return arms, []
    needs = needs_of(accepted)
    kept: list[Arm] = []
    out: list[Exclusion] = []
    for arm in arms:
        reason = lacking(model_spec(arm), needs) if declared else None
        if reason is None and refused[arm.deployment] and needs.tokens >= refused[arm.deployment]:
            reason = "context_window_learnt"
        if reason is None:
            kept.append(arm)
        else:
            out.append(Exclusion(deployment=arm.deployment, reason=reason))
    return kept, out


def serves(arm: Arm, accepted: RequestAccepted) -> bool:
    """Whether ``arm``'s model is of the kind the request asks for (embeddings or chat)."""
    spec = model_spec(arm)
    return (spec is not None and spec.kind == "embeddings") == accepted.request.is_embeddings


def learn_window(arm: ArmState, accepted: RequestAccepted) -> ArmState:
    """The arm after refusing ``accepted``'s prompt as longer than its context window:
    no request as large goes to it again."""
    tokens = needs_of(accepted).tokens
    if arm.refused_tokens and arm.refused_tokens <= tokens:
        return arm
    return evolve_arm(arm, refused_tokens=tokens)


def refusal(out: Iterable[Exclusion], accepted: RequestAccepted) -> ErrorBody:
    """The 400 of a request no candidate can serve."""
    needs = needs_of(accepted)
    reasons = ", ".join(f"{e.deployment}: {e.reason}" for e in out)
    kinds = ["embeddings"] if needs.embeddings else sorted(needs.modalities)
    wanted = [*kinds, f"about {needs.tokens} tokens"]
    return ErrorBody(
        type="invalid_request",
        message=f"no deployment can serve this request ({', '.join(wanted)}): {reasons}",
        code="no_capable_deployment",
        http_status=400,
    )
