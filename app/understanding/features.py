r"""The contextual features of a request, computed once, purely (docs/design.md#routing).

=========================  ==================================================================
``task_type``              the detected domain (:func:`~app.understanding.domains.detect_domain`)
                           or ``"general"``
``has_code``               the user text contains code *syntax* (fences, ``def f(``, imports,
                           ``SELECT … FROM``, tags, tracebacks …), not merely talks about code
``is_creative``            asks for creative writing: poem, story, song, slogan, joke, fiction
``is_realtime``            needs a fast or fresh answer: urgency (*urgent*, *ASAP*, *vite*,
                           *real time*, *en direct*) or current facts (*aujourd'hui*, *today*,
                           *latest news*, *météo*, *right now*)
``length_bucket``          characters of all messages' text (``prompt_chars``): ``short`` < 500
                           ≤ ``medium`` < 4 000 ≤ ``long`` < 32 000 ≤ ``very_long``. At ~4
                           characters a token: under ~125 tokens, ~1k, ~8k (fits any current
                           context window) and beyond (needs a large-context model).
``modality``               the input's kind: ``audio`` if any part is audio (``input_audio``),
                           else ``image`` if any part is an image (``image_url``,
                           ``input_image``), else ``text``: the rarer capability decides
``input_modalities``       every kind present, sorted (``["image", "text"]``)
``requested_modalities``   output kinds asked for besides text, sorted: ``image`` when an
                           image-generation rule matches (*génère une image*, *draw me a*,
                           *DALL-E*), ``audio`` when a speech-output rule does (*synthèse
                           vocale*, *read aloud*, *en MP3*); ``[]`` means a text answer
=========================  ==================================================================

Domain and cues read the user messages (:func:`~app.understanding.text.request_text`,
at most 16 384 characters of them: :func:`~app.understanding.text.analysed`); the
length counts every message, as the context a model must take. French and English
cues, matched without accents and case. The :class:`Features` model itself is part
of the event contract (:mod:`app.contract.features`, re-exported here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.contract.features import Features as Features  # the model, in the contract
from app.contract.features import LengthBucket, Modality
from app.understanding.domains import CODE_SYNTAX, decide, hits_in
from app.understanding.patterns import CODE_SYNTAX_TABLE, DOMAIN_TABLE
from app.understanding.rules import RuleSet, parse_rules
from app.understanding.text import MAX_ANALYSED_CHARS, normalised, prompt_text, request_text

#: Upper bounds (exclusive, in characters) of the first three length buckets.
LENGTH_BUCKETS: tuple[tuple[int, LengthBucket], ...] = (
    (500, "short"),
    (4_000, "medium"),
    (32_000, "long"),
)
#: Domain rules that ask for an output modality (``illustre``, ``voix``, ``narration``
#: alone do not: "illustre ce point par un exemple", "la voix passive").
IMAGE_OUTPUT_RULES = frozenset({"generate", "draw", "model", "text_to_image"})
AUDIO_OUTPUT_RULES = frozenset({"tts", "synthesis", "aloud", "audiobook"})
#: Content-part types by modality (OpenAI chat parts; ``input_image`` from the Responses API).
IMAGE_PART_TYPES = frozenset({"image_url", "input_image", "image"})
AUDIO_PART_TYPES = frozenset({"input_audio", "audio"})

CUE_TABLE = r"""
creative  poem      \bpoe(?:me|mes|m|ms|sie|sies|try|tique|tic)\b|\bhaikus?\b|\bsonnets?\b
creative  poem      |\brim(?:e|es|er)\b|\brhym\w*|\bvers\s+libres?\b
creative  story     \bstor(?:y|ies)\b|\b(?:une|des|petite|belle)\s+histoires?\b|\bcontes?\b
creative  story     |\bfables?\b|\bfairy\s+tales?\b|\b(?:un|mon|son)\s+roman\b|\bnovels?\b
creative  story     |\bfiction\w*|\bpersonnages?\b|\bscreenplay\b|\bscenario\s+de\s+film\b
creative  story     |\becri[st](?:-moi)?\s+une\s+nouvelle\b
creative  song      \bchansons?\b|\bsongs?\b|\blyrics\b|\bparoles\s+de\s+chanson\b
creative  slogan    \bslogans?\b|\btaglines?\b|\baccroches?\b|\bblagues?\b|\bjokes?\b
creative  invent    \bimagin(?:e|ez|ons)\b|\binvent(?:e|ez|er)?\b|\bcreati(?:f|ve|vite|vity)\b
creative  invent    |\bbrainstorm\w*

realtime  urgency   \burgent\w*|\basap\b|\bau\s+plus\s+vite\b|\bvite\b|\bimmediate?ment\b
realtime  urgency   |\bimmediately\b|\breal[- ]?time\b|\btemps\s+reel\b|\ben\s+direct\b
realtime  urgency   |\blive\s+(?:score|stream|feed|update|data)s?\b|\bright\s+now\b
realtime  urgency   |\btout\s+de\s+suite\b|\ben\s+ce\s+moment\b
realtime  fresh     \baujourd'hui\b|\btoday\b|\btonight\b|\bce\s+soir\b|\bce\s+matin\b
realtime  fresh     |\bthis\s+(?:morning|week)\b|\bcette\s+semaine\b|\blatest\b|\bbreaking\b
realtime  fresh     |\bdernieres?\s+(?:nouvelles|actualites|infos)\b|\bactualites?\b|\bnews\b
realtime  fresh     |\bmeteo\b|\bweather\b|\bforecast\b|\bcours\s+actuel\b|\bprix\s+actuel\b
realtime  fresh     |\bcurrent\s+(?:price|weather|score|news)\b|\bscore\s+du\s+match\b

audio     output    \b(?:en|as|in|au\s+format)\s+(?:audio|mp3|wav|ogg)\b
audio     output    |\b(?:fichier|file)\s+(?:audio|mp3|wav)\b|\bmessage\s+vocal\b
audio     output    |\bvoice\s+message\b
audio     output    |\bgener\w*\s+(?:(?:un|une|an?|the)\s+)?(?:audio|son|sound)\b
"""

if TYPE_CHECKING:
    from app.contract import ChatRequest


#: Version of every rule table and threshold behind the features: a decision trace that
#: carries it says which rules classified the request (a table change changes it).
RULES_VERSION = hashlib.sha256(
    "\n".join(
        [DOMAIN_TABLE, CODE_SYNTAX_TABLE, CUE_TABLE, repr(LENGTH_BUCKETS), repr(MAX_ANALYSED_CHARS)]
    ).encode()
).hexdigest()[:12]

_CUES = parse_rules(CUE_TABLE)
CREATIVE = RuleSet.build(_CUES["creative"])
REALTIME = RuleSet.build(_CUES["realtime"])
AUDIO_OUTPUT = RuleSet.build(_CUES["audio"])
CODE = RuleSet.build([("syntax", CODE_SYNTAX)])


def length_bucket(chars: int) -> LengthBucket:
    for bound, bucket in LENGTH_BUCKETS:
        if chars < bound:
            return bucket
    return "very_long"


def input_modalities(request: ChatRequest) -> list[str]:
    """Kinds of content in the messages, sorted; ``text`` when any text is present (an
    embeddings request's input is text)."""
    if request.is_embeddings:
        return ["text"]
    kinds: set[str] = set()
    for message in request.messages:
        content: Any = message.content
        if isinstance(content, str):
            if content:
                kinds.add("text")
            continue
        for part in content or []:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in IMAGE_PART_TYPES:
                kinds.add("image")
            elif kind in AUDIO_PART_TYPES:
                kinds.add("audio")
            elif isinstance(part, dict) and part.get("text"):
                kinds.add("text")
    return sorted(kinds)


def modality_of(kinds: list[str]) -> Modality:
    if "audio" in kinds:
        return "audio"
    if "image" in kinds:
        return "image"
    return "text"


def requested_modalities(text: str) -> list[str]:
    """Output kinds the text asks for besides text (sorted)."""
    plain, folded = normalised(text)
    return _requested(plain, folded, hits_in(plain, folded))


def _requested(plain: str, folded: str, hits: Mapping[str, Sequence[str]]) -> list[str]:
    wanted = set()
    if IMAGE_OUTPUT_RULES.intersection(hits.get("image", ())):
        wanted.add("image")
    if AUDIO_OUTPUT_RULES.intersection(hits.get("voice", ())) or AUDIO_OUTPUT.search(folded, plain):
        wanted.add("audio")
    return sorted(wanted)


def extract_features(request: ChatRequest) -> Features:
    text = request_text(request)
    plain, folded = normalised(text)
    kinds = input_modalities(request)
    hits = hits_in(plain, folded, [k for k in kinds if k != "text"])
    match = decide(hits)
    chars = len(prompt_text(request))
    return Features(
        rules_version=RULES_VERSION,
        task_type=match.domain if match is not None else "general",
        domain=match,
        has_code=CODE.search(folded, plain),
        is_creative=CREATIVE.search(folded, plain),
        is_realtime=REALTIME.search(folded, plain),
        length_bucket=length_bucket(chars),
        prompt_chars=chars,
        modality=modality_of(kinds),
        input_modalities=kinds,
        requested_modalities=_requested(plain, folded, hits),
    )
