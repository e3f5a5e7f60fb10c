"""The 15 domains, their multilingual patterns, and specialist filtering
(docs/design.md#routing, step 5).

Detection is accent- and case-insensitive (see :mod:`~app.understanding.rules`):
the patterns (:mod:`~app.understanding.patterns`) are written without accents and
match ``équation``, ``Equation`` and ``ÉQUATION`` alike; a few acronyms (``ROI``)
match in capitals only, because in lower case they are ordinary French words
(*roi*, king). Each domain's rules are compiled into one scan
(:class:`~app.understanding.rules.RuleSet`); a domain's match count is its
number of non-overlapping matches (``len(pattern.findall(prompt))``).
A prompt longer than 16 384 characters is read by its first 12 288 and last
4 096 (where instructions sit), which bounds the cost of a 1 MB request.

**The winner** is the domain with the most matches. **Ties** go to the domain
listed first in the domain table (math, coding, reasoning, image, voice,
transcription, translation, vision, embedding, medical, finance, science,
classification, sentiment, legal): ``max(scores, key=scores.get)`` over a dict
filled in that order would give the same, but the tie-break is made explicit
instead of left to dict order.

**Specialists** (:func:`specialists` and :func:`specialized_model`): when a
domain is detected and some providers have a
model marked ``specialized: <domain>``, only those are candidates and each uses
its first such model (config order). Otherwise every generalist provider (one
with at least one unspecialised model) is a candidate with its default model.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from app.config.providers import ProviderConfig, deployment_id
from app.contract.features import DOMAIN_ORDER as DOMAIN_ORDER  # the names, in the contract
from app.contract.features import DomainMatch as DomainMatch  # the model, in the contract
from app.understanding.patterns import CODE_SYNTAX_TABLE, DOMAIN_TABLE
from app.understanding.rules import RuleSet, parse_rules
from app.understanding.text import normalised

#: Code syntax, one pattern (``has_code``); it is also the ``coding.syntax`` rule.
CODE_SYNTAX = "|".join(body for _, body in parse_rules(CODE_SYNTAX_TABLE)["code"])

#: Per domain, in table order: ``(rule name, pattern)``; code syntax is ``coding``'s first rule.
PATTERNS: dict[str, tuple[tuple[str, str], ...]] = {
    domain: tuple(rules) for domain, rules in parse_rules(DOMAIN_TABLE).items()
}
PATTERNS["coding"] = (("syntax", CODE_SYNTAX), *PATTERNS["coding"])
if tuple(PATTERNS) != DOMAIN_ORDER:
    raise AssertionError("DOMAIN_TABLE must list the 15 domains in table order")


COMPILED: dict[str, RuleSet] = {domain: RuleSet.build(PATTERNS[domain]) for domain in DOMAIN_ORDER}

#: A request's input parts count as matches too: an image to look at is a vision task,
#: a recording to listen to a transcription task (one match each, rule ``input_<kind>``).
INPUT_MODALITY_DOMAINS: dict[str, str] = {"image": "vision", "audio": "transcription"}


def domain_hits(text: str, input_modalities: Collection[str] = ()) -> dict[str, list[str]]:
    """Per domain with at least one match (table order), the rule name of every match.

    Reads at most :data:`~app.understanding.text.MAX_ANALYSED_CHARS` of ``text``
    (its head and tail, see :func:`~app.understanding.text.analysed`).
    """
    return hits_in(*normalised(text), input_modalities)


def hits_in(
    plain: str, folded: str, input_modalities: Collection[str] = ()
) -> dict[str, list[str]]:
    """:func:`domain_hits` on text already :func:`~app.understanding.text.normalised`."""
    hits: dict[str, list[str]] = {}
    for domain in DOMAIN_ORDER:
        names = COMPILED[domain].hits(folded, plain)
        names += [
            f"input_{kind}"
            for kind in sorted(input_modalities)
            if INPUT_MODALITY_DOMAINS.get(kind) == domain
        ]
        if names:
            hits[domain] = names
    return hits


def detect_domain(text: str, input_modalities: Collection[str] = ()) -> DomainMatch | None:
    """The request's domain: most matches wins, ties in table order; None when none.

    ``input_modalities`` are the kinds of the request's content parts (``"image"``,
    ``"audio"``); each adds one match to its domain (:data:`INPUT_MODALITY_DOMAINS`).
    """
    return decide(domain_hits(text, input_modalities))


def decide(hits: Mapping[str, Sequence[str]]) -> DomainMatch | None:
    """The winner of :func:`domain_hits`: most matches, ties in table order."""
    if not hits:
        return None
    counts = {domain: len(names) for domain, names in hits.items()}
    top = max(counts.values())
    leaders = [domain for domain in DOMAIN_ORDER if counts.get(domain) == top]
    winner = leaders[0]
    return DomainMatch(
        domain=winner,
        counts=counts,
        rule="tie_table_order" if len(leaders) > 1 else "most_matches",
        tied=leaders if len(leaders) > 1 else [],
        patterns=sorted({f"{winner}.{name}" for name in hits[winner]}),
    )


# --------------------------------------------------------------------------- specialists


def specialized_model(provider: ProviderConfig, domain: str) -> str | None:
    """The first model of ``provider`` marked for ``domain``, else None."""
    for spec in provider.models:
        if spec.specialized == domain:
            return spec.name
    return None


def specialists(providers: Sequence[ProviderConfig], domain: str) -> list[ProviderConfig]:
    """The providers with a model for ``domain``."""
    return [p for p in providers if specialized_model(p, domain) is not None]


def is_generalist(provider: ProviderConfig) -> bool:
    """A provider with at least one unspecialised model serves any prompt."""
    return any(spec.specialized is None for spec in provider.models)


#: Exclusion reasons, as they appear in ``Decision.excluded``.
REASON_NOT_SPECIALIST = "domain_not_specialist"
REASON_SPECIALIST_ONLY = "specialist_only"


@dataclass(frozen=True, slots=True)
class DomainCandidates:
    """Who may be ranked for this request, with which model (routing step 5)."""

    domain: str | None
    #: ``specialists``, ``fallback_generalists`` (domain without specialists),
    #: ``no_domain``, or ``all_providers`` (no generalist at all: every provider, default model).
    rule: Literal["specialists", "fallback_generalists", "no_domain", "all_providers"]
    #: ``(provider, model)`` in config order.
    chosen: tuple[tuple[ProviderConfig, str], ...]
    #: ``(deployment, reason)`` of the providers left out, in config order.
    excluded: tuple[tuple[str, str], ...]

    @property
    def bandit_scope(self) -> str | None:
        """The domain whose own bandit statistics rank these candidates, or None (shared)."""
        return self.domain if self.rule == "specialists" else None


def domain_candidates(providers: Sequence[ProviderConfig], domain: str | None) -> DomainCandidates:
    """Narrow a route's providers to the domain's specialists, or fall back to generalists."""
    if domain is not None:
        experts = specialists(providers, domain)
        if experts:
            chosen = tuple((p, specialized_model(p, domain) or p.default_model) for p in experts)
            expert_ids = {p.id for p in experts}
            excluded = tuple(
                (deployment_id(p.id, p.default_model), REASON_NOT_SPECIALIST)
                for p in providers
                if p.id not in expert_ids
            )
            return DomainCandidates(domain, "specialists", chosen, excluded)
    generalists = [p for p in providers if is_generalist(p)]
    if not generalists:
        everyone = tuple((p, p.default_model) for p in providers)
        return DomainCandidates(domain, "all_providers", everyone, ())
    return DomainCandidates(
        domain,
        "no_domain" if domain is None else "fallback_generalists",
        tuple((p, p.default_model) for p in generalists),
        tuple(
            (deployment_id(p.id, p.default_model), REASON_SPECIALIST_ONLY)
            for p in providers
            if not is_generalist(p)
        ),
    )
