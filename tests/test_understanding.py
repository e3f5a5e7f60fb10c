"""Request understanding: the 15 domains, specialist filtering, the features."""

from __future__ import annotations

from typing import Any

import pytest
from factories import provider

from app.config.providers import deployment_id
from app.contract import ChatMessage, ChatRequest
from app.understanding.domains import (
    DOMAIN_ORDER,
    PATTERNS,
    REASON_NOT_SPECIALIST,
    REASON_SPECIALIST_ONLY,
    detect_domain,
    domain_candidates,
    specialists,
    specialized_model,
)
from app.understanding.features import RULES_VERSION, extract_features, length_bucket
from app.understanding.text import fold, request_text

# --------------------------------------------------------------------------- domains

#: Per domain, one French and one English prompt (as a user would write them).
PROMPTS: dict[str, tuple[str, str]] = {
    "math": (
        "Calcule la dérivée de f(x) = x² et résous l'équation.",
        "What is the probability of rolling two sixes? Use \\sum if needed.",
    ),
    "coding": (
        "Écris une fonction Python qui trie une liste, avec des tests pytest.",
        "Debug this API client: the function returns None.",
    ),
    "reasoning": (
        "Raisonne étape par étape et explique pourquoi le ciel est bleu.",
        "Think step by step, with a chain of thought, and explain why it fails.",
    ),
    "image": (
        "Génère une image d'un chat astronaute, style Stable Diffusion.",
        "Draw me a dragon: generate an image in the style of DALL-E 3.",
    ),
    "voice": (
        "Fais une synthèse vocale de ce paragraphe avec une voix grave.",
        "Use text to speech to read this aloud for the narration.",
    ),
    "transcription": (
        "Transcris cet enregistrement, c'est une dictée.",
        "Run speech to text with Whisper on this meeting recording.",
    ),
    "translation": (
        "Traduis ce paragraphe en anglais, s'il te plaît.",
        "Translate to French: the weather is nice.",
    ),
    "vision": (
        "Décris cette image et fais l'OCR du texte visible.",
        "What is in this picture? Read the document and extract the total.",
    ),
    "embedding": (
        "Vectorise ces phrases pour une recherche sémantique par similarité cosinus.",
        "Embed these documents and rank them by cosine similarity for semantic search.",
    ),
    "medical": (
        "Quels symptômes de cette maladie justifient une IRM pour le patient ?",
        "Give a medical diagnosis for a patient with these symptoms.",
    ),
    "finance": (
        "Analyse le ROI et l'EBITDA de cette entreprise cotée en bourse.",
        "Should I buy this stock? Compare trading strategies and their ROI.",
    ),
    "science": (
        "Explique la physique quantique et la chimie des molécules.",
        "Describe the biology of this molecule and its quantum chemistry.",
    ),
    "classification": (
        "Classifie ces e-mails : spam ou non ? Catégorise-les avec un label.",
        "Classify these comments and detect toxic ones; label each as spam or not.",
    ),
    "sentiment": (
        "Quel est le sentiment de cet avis client : positif ou négatif ?",
        "Analyse the sentiment of these reviews: positive or negative? Any satisfaction?",
    ),
    "legal": (
        "Ce contrat est-il conforme au RGPD ? Il me faut une analyse juridique.",
        "Review this contract for GDPR compliance and legal liability.",
    ),
}

#: Each domain's key patterns, as the domain table lists them: each alone must select its
#: domain.
SEED_KEY_PATTERNS: dict[str, list[str]] = {
    "math": ["calcul", "équation", "dérivée", "matrice", "probability", "sqrt", "\\sum"],
    "coding": ["code", "function", "class", "def", "python", "API", "debug", "pytest"],
    "reasoning": ["raisonne", "explique pourquoi", "step by step", "chain of thought"],
    "image": ["génère image", "dessine", "illustre", "stable diffusion", "dall-e"],
    "voice": ["text to speech", "synthèse vocale", "voix", "narration"],
    "transcription": ["transcrire", "speech to text", "whisper", "dictée"],
    "translation": ["traduis", "traduction", "en anglais", "en français", "translate to"],
    "vision": ["cette image", "décris image", "OCR", "lire document"],
    "embedding": ["embed", "vectorise", "similarity", "semantic search", "cosine"],
    "medical": ["médical", "diagnostic", "symptôme", "patient", "maladie", "IRM"],
    "finance": ["financer", "bourse", "stock", "trading", "ROI", "EBITDA"],
    "science": ["physique", "chimie", "biologie", "molécule", "quantum"],
    "classification": ["classifie", "catégorise", "label", "spam", "toxic", "detect"],
    "sentiment": ["sentiment", "opinion", "positif négatif", "satisfaction", "avis"],
    "legal": ["juridique", "contrat", "réglementation", "RGPD", "droit", "tribunal"],
}


def test_the_fifteen_domains_in_seed_table_order() -> None:
    assert DOMAIN_ORDER == tuple(PROMPTS) == tuple(SEED_KEY_PATTERNS) == tuple(PATTERNS)
    assert len(DOMAIN_ORDER) == 15


@pytest.mark.parametrize("language", [0, 1], ids=["fr", "en"])
@pytest.mark.parametrize("domain", DOMAIN_ORDER)
def test_every_domain_in_french_and_english(domain: str, language: int) -> None:
    match = detect_domain(PROMPTS[domain][language])
    assert match is not None
    assert match.domain == domain
    assert match.counts[domain] >= 2
    assert all(p.startswith(f"{domain}.") for p in match.patterns)


@pytest.mark.parametrize(
    ("domain", "term"), [(d, t) for d, terms in SEED_KEY_PATTERNS.items() for t in terms]
)
def test_every_seed_key_pattern_alone(domain: str, term: str) -> None:
    for text in (term, f"Voici la demande : {term}.", f"«{term}»"):
        match = detect_domain(text)
        assert match is not None and match.domain == domain, text
        assert match.counts == {domain: 1}
    if term != "ROI":  # ROI is case-sensitive on purpose, see below
        upper = detect_domain(term.upper())
        assert upper is not None and upper.domain == domain


def test_accent_insensitive_and_word_bounded() -> None:
    for text in ("equation derivee", "ÉQUATION DÉRIVÉE", "équation dérivée"):
        match = detect_domain(text)
        assert match is not None and match.counts == {"math": 2}
    # Word boundaries: "decode" is not "code", "dalle" (a slab) is not DALL-E,
    # lower-case "roi" is the French king, not a return on investment.
    assert detect_domain("Décode ce message de la dalle du roi") is None
    assert detect_domain("Le roi de France") is None
    assert detect_domain("Quel est le ROI ?") is not None


def test_no_domain_is_general() -> None:
    assert detect_domain("Bonjour, comment vas-tu ?") is None
    assert detect_domain("Hello there, how are you?") is None
    assert detect_domain("") is None


def test_most_matches_wins() -> None:
    # one legal match (contrat), two coding matches (code, python)
    match = detect_domain("Écris le code Python qui lit ce contrat")
    assert match is not None
    assert match.domain == "coding"
    assert match.counts == {"coding": 2, "legal": 1}
    assert match.rule == "most_matches" and match.tied == []


def test_tie_goes_to_seed_table_order() -> None:
    # legal (contrat) vs coding (python): one match each; coding comes first in the table.
    match = detect_domain("contrat python")
    assert match is not None
    assert match.domain == "coding"
    assert match.rule == "tie_table_order"
    assert match.tied == ["coding", "legal"]
    # Order of appearance in the prompt does not matter, only the table order.
    reverse = detect_domain("python contrat")
    assert reverse == match
    # A three-way tie: math < finance < legal in the table.
    three = detect_domain("tribunal, bourse, équation")
    assert three is not None and three.domain == "math"
    assert three.tied == ["math", "finance", "legal"]
    assert list(three.counts) == ["math", "finance", "legal"]  # table order, not prompt order


def test_input_parts_count_toward_vision_and_transcription() -> None:
    image_only = detect_domain("Qu'est-ce que c'est ?", ["image"])
    assert image_only is not None and image_only.domain == "vision"
    assert image_only.patterns == ["vision.input_image"]
    audio = detect_domain("What does he say?", ["audio"])
    assert audio is not None and audio.domain == "transcription"


def test_code_syntax_counts_as_coding() -> None:
    snippet = "Pourquoi ça plante ?\n```\nimport os\ndef main():\n    return 1\n```"
    match = detect_domain(snippet)
    assert match is not None and match.domain == "coding"
    assert match.patterns == ["coding.syntax"]
    assert match.counts["coding"] == 4  # two fences, the import, the def


# --------------------------------------------------------------------------- specialists


def _provider(pid: str, *models: tuple[str, str | None]) -> Any:
    return provider(pid, models=[{"name": n, "specialized": s} for n, s in models])


GENERAL = _provider("openai-x", ("gpt", None))
CODER = _provider("deepseek-x", ("chat", None), ("coder", "coding"), ("coder-2", "coding"))
LAWYER = _provider("mistral-x", ("legal-only", "legal"))


def test_specialists_and_their_model() -> None:
    providers = [GENERAL, CODER, LAWYER]
    assert specialists(providers, "coding") == [CODER]
    assert specialists(providers, "legal") == [LAWYER]
    assert specialists(providers, "math") == []
    assert specialized_model(CODER, "coding") == "coder"  # the first, in config order
    assert specialized_model(GENERAL, "coding") is None


def test_detected_domain_with_specialists_keeps_only_them() -> None:
    result = domain_candidates([GENERAL, CODER, LAWYER], "coding")
    assert result.rule == "specialists"
    assert [(p.id, m) for p, m in result.chosen] == [("deepseek-x", "coder")]
    assert result.excluded == (
        (deployment_id("openai-x", "gpt"), REASON_NOT_SPECIALIST),
        (deployment_id("mistral-x", "legal-only"), REASON_NOT_SPECIALIST),
    )
    assert result.bandit_scope == "coding"


def test_domain_without_specialists_falls_back_to_generalists() -> None:
    result = domain_candidates([GENERAL, CODER, LAWYER], "math")
    assert result.rule == "fallback_generalists"
    assert [(p.id, m) for p, m in result.chosen] == [("openai-x", "gpt"), ("deepseek-x", "chat")]
    assert result.excluded == ((deployment_id("mistral-x", "legal-only"), REASON_SPECIALIST_ONLY),)
    assert result.bandit_scope is None
    none = domain_candidates([GENERAL, CODER, LAWYER], None)
    assert none.rule == "no_domain" and none.chosen == result.chosen


def test_route_of_specialists_only_still_answers() -> None:
    result = domain_candidates([LAWYER], "math")
    assert result.rule == "all_providers"
    assert [(p.id, m) for p, m in result.chosen] == [("mistral-x", "legal-only")]
    assert result.excluded == ()


# --------------------------------------------------------------------------- features


def _request(*messages: dict[str, Any]) -> ChatRequest:
    return ChatRequest(request_id="r1", messages=[ChatMessage.model_validate(m) for m in messages])


def _user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def test_features_french_prompt() -> None:
    features = extract_features(
        _request(_user("Écris-moi un poème sur la mer, vite, c'est urgent !"))
    )
    assert features.task_type == "general" and features.domain is None
    assert features.is_creative and features.is_realtime and not features.has_code
    assert features.length_bucket == "short"
    assert features.modality == "text" and features.input_modalities == ["text"]
    assert features.requested_modalities == []


def test_features_english_prompt_with_code() -> None:
    prompt = "Why does this fail?\n```python\nfrom app import main\nmain()\n```"
    features = extract_features(_request(_user(prompt)))
    assert features.task_type == "coding"
    assert features.domain is not None and features.domain.domain == "coding"
    assert features.has_code and not features.is_creative and not features.is_realtime


def test_talking_about_code_is_not_having_code() -> None:
    for prompt in ("Écris une fonction Python qui trie une liste", "Write a Python function"):
        features = extract_features(_request(_user(prompt)))
        assert features.task_type == "coding" and not features.has_code


def test_realtime_and_creative_cues_in_both_languages() -> None:
    realtime = ["Quelle est la météo aujourd'hui ?", "What's the latest news right now?"]
    creative = ["Raconte une histoire de pirates", "Write a short story and a song"]
    for text in realtime:
        assert extract_features(_request(_user(text))).is_realtime, text
    for text in creative:
        assert extract_features(_request(_user(text))).is_creative, text
    calm = extract_features(_request(_user("L'histoire de la Révolution française")))
    assert not calm.is_creative and not calm.is_realtime


@pytest.mark.parametrize(
    ("chars", "bucket"),
    [
        (0, "short"),
        (499, "short"),
        (500, "medium"),
        (3_999, "medium"),
        (4_000, "long"),
        (31_999, "long"),
        (32_000, "very_long"),
        (10**6, "very_long"),
    ],
)
def test_length_bucket_thresholds(chars: int, bucket: str) -> None:
    assert length_bucket(chars) == bucket


def test_length_counts_every_message() -> None:
    request = _request({"role": "system", "content": "x" * 300}, _user("y" * 300))
    features = extract_features(request)
    assert features.prompt_chars == 601 and features.length_bucket == "medium"


def test_modality_from_content_parts() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.test/cat.png"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    text = {"type": "text", "text": "Qu'y a-t-il sur cette image ?"}
    seen = extract_features(_request(_user([text, image])))
    assert seen.modality == "image" and seen.input_modalities == ["image", "text"]
    assert seen.task_type == "vision"
    heard = extract_features(_request(_user([audio])))
    assert heard.modality == "audio" and heard.task_type == "transcription"
    both = extract_features(_request(_user([image, audio])))
    assert both.modality == "audio" and both.input_modalities == ["audio", "image"]


def test_requested_output_modalities() -> None:
    cases = {
        "Génère une image de chat et lis-la à voix haute": ["audio", "image"],
        "Generate a picture of a lighthouse": ["image"],
        "Envoie la réponse en MP3": ["audio"],
        "Résume ce texte": [],
        # domain cues that are not output requests
        "Illustre ce point par un exemple": [],
        "Mets cette phrase à la voix passive": [],
    }
    for prompt, wanted in cases.items():
        assert extract_features(_request(_user(prompt))).requested_modalities == wanted, prompt


def test_system_prompt_does_not_decide_the_domain() -> None:
    request = _request(
        {"role": "system", "content": "Tu es un assistant juridique : contrat, tribunal, RGPD."},
        _user("Calcule 12 * 7"),
    )
    assert request_text(request) == "Calcule 12 * 7"
    assert extract_features(request).task_type == "math"
    system_only = _request({"role": "system", "content": "Traduis en anglais."})
    assert extract_features(system_only).task_type == "translation"


def test_features_are_deterministic_and_hold_no_text() -> None:
    request = _request(_user(PROMPTS["legal"][0]))
    first = extract_features(request)
    assert first == extract_features(request)
    assert first.rules_version == RULES_VERSION and len(RULES_VERSION) == 12
    dumped = first.model_dump_json()
    assert "contrat" not in fold(dumped) and "rgpd" not in fold(dumped)
