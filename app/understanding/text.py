"""Text normalisation and message reading shared by the understanding modules.

Matching is accent-insensitive: the prompt is reduced to its base letters (NFKD,
combining diacritics dropped, ``œ``/``æ``/``ß`` spelled out, typographic
apostrophes and non-breaking spaces made ASCII), so ``équation``, ``equation``
and ``ÉQUATION`` read the same. Case is kept by :func:`strip_accents` (for the
few case-sensitive rules such as ``ROI``) and dropped by :func:`fold`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.contract import ChatRequest


_SPELLED_OUT = {
    "œ": "oe",
    "Œ": "OE",
    "æ": "ae",
    "Æ": "AE",
    "ø": "o",
    "Ø": "O",
    "ß": "ss",
    "’": "'",
    "‘": "'",
    "ʼ": "'",
    "\u00a0": " ",
    "\u202f": " ",
}
_SPECIAL = re.compile("|".join(_SPELLED_OUT))
#: Combining diacritics (Latin, Greek, Cyrillic): the marks NFKD splits off accented letters.
_COMBINING = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")

#: Longest text the understanding rules read; a longer one is read by its head and tail.
MAX_ANALYSED_CHARS = 16_384
HEAD_CHARS = 12_288

#: Message roles whose text is the user's request (what the domain and features read).
USER_ROLES = frozenset({"user"})


def strip_accents(text: str) -> str:
    """``"Équation dérivée"`` -> ``"Equation derivee"``; case is kept."""
    if text.isascii():
        return text
    spelled = _SPECIAL.sub(lambda m: _SPELLED_OUT[m.group()], text)
    return _COMBINING.sub("", unicodedata.normalize("NFKD", spelled))


def fold(text: str) -> str:
    """Accent- and case-insensitive form: ``"ÉQUATION"`` -> ``"equation"``."""
    return strip_accents(text).casefold()


def part_text(part: dict[str, Any]) -> str:
    """The text of one content part (``{"type": "text", "text": ...}``), else ``""``."""
    value = part.get("text")
    return value if isinstance(value, str) else ""


def messages_text(request: ChatRequest, roles: Iterable[str] | None = None) -> str:
    """Text of the messages with the given roles (all when ``None``), one per line. An
    embeddings request's texts are the user's."""
    wanted = None if roles is None else frozenset(roles)
    if request.is_embeddings:
        return "\n".join(request.input or ()) if wanted is None or "user" in wanted else ""
    chunks: list[str] = []
    for message in request.messages:
        if wanted is not None and message.role not in wanted:
            continue
        if isinstance(message.content, str):
            chunks.append(message.content)
        elif isinstance(message.content, list):
            chunks.extend(part_text(part) for part in message.content if isinstance(part, dict))
    return "\n".join(chunk for chunk in chunks if chunk)


def prompt_text(request: ChatRequest) -> str:
    """Every message's text, exactly as ``app.ingest.prompt_text`` (``prompt_chars``) reads it.

    Kept here so that ingest can import this package without an import cycle. An
    embeddings request's texts, one per line.
    """
    if request.is_embeddings:
        return "\n".join(request.input or ())
    chunks: list[str] = []
    for message in request.messages:
        if isinstance(message.content, str):
            chunks.append(message.content)
        elif isinstance(message.content, list):
            chunks.extend(str(part.get("text", "")) for part in message.content)
    return "\n".join(chunks)


def request_text(request: ChatRequest) -> str:
    """What understanding reads: the user messages' text, or every message's when none.

    System and developer prompts are the platform's instructions, not the task;
    reading them would route every request of a platform to its system prompt's
    domain. A request made only of system/assistant text is read whole.
    """
    return messages_text(request, USER_ROLES) or messages_text(request)


def normalised(text: str) -> tuple[str, str]:
    """``(plain, folded)`` of the analysed part of ``text``: what rule sets match against."""
    plain = strip_accents(analysed(text))
    return plain, plain.casefold()


def analysed(text: str) -> str:
    """``text``, or its first 12 288 and last 4 096 characters when it is longer than 16 384.

    Instructions sit at the start or the end of a long prompt ("Traduis ce texte
    en anglais : …", "… Résume ce document."); reading a bounded part keeps the
    cost of understanding a 1 MB request at that of a 16 KB one.
    """
    if len(text) <= MAX_ANALYSED_CHARS:
        return text
    return text[:HEAD_CHARS] + "\n" + text[len(text) - (MAX_ANALYSED_CHARS - HEAD_CHARS) :]
