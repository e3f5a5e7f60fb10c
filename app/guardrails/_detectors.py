"""Built-in detectors of personal data and secrets in an answer's text.

Each is a bounded regular expression (no match is longer than :data:`MAX_WIDTH`
characters, which is what lets a stream be screened as it comes) and, where the shape
alone says too little, a check of what it found: the Luhn digit of a card number, the
mod-97 checksum of an IBAN, the number of digits of a phone number.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

DetectorName = Literal["email", "phone", "card_number", "iban", "api_key"]
#: The longest text a detector or a configured pattern may match.
MAX_WIDTH: Final = 256


@dataclass(frozen=True, slots=True)
class Detector:
    name: DetectorName
    pattern: re.Pattern[str]
    valid: Callable[[str], bool]


def luhn_valid(digits: str) -> bool:
    """The Luhn check of a card number's digits."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card(text: str) -> bool:
    digits = re.sub(r"\D", "", text)
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


def iban_valid(text: str) -> bool:
    """ISO 13616: 15 to 34 characters whose rearranged number is 1 modulo 97."""
    compact = text.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def _phone(text: str) -> bool:
    """9 to 15 digits, written as a phone number is: a ``+`` or separators."""
    digits = sum(char.isdigit() for char in text)
    return 9 <= digits <= 15 and (text.startswith("+") or any(c in text for c in " .-()"))


def _always(_: str) -> bool:
    return True


DETECTORS: Final[dict[DetectorName, Detector]] = {
    detector.name: detector
    for detector in (
        Detector(
            "email",
            re.compile(
                r"(?<![\w.%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,40}"
                r"(?:\.[A-Za-z0-9-]{1,40}){0,3}\.[A-Za-z]{2,24}(?![\w-])"
            ),
            _always,
        ),
        Detector("card_number", re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])"), _card),
        Detector(
            "iban",
            re.compile(
                r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?"
                r"(?![A-Za-z0-9])"
            ),
            iban_valid,
        ),
        Detector(
            "api_key",
            re.compile(
                r"(?<![\w-])(?:sk-[A-Za-z0-9_-]{20,160}|AKIA[0-9A-Z]{16}"
                r"|gh[pousr]_[A-Za-z0-9]{36,40}|AIza[0-9A-Za-z_-]{35}"
                r"|xox[abprs]-[A-Za-z0-9-]{10,100})(?![\w-])"
            ),
            _always,
        ),
        Detector(
            "phone",
            re.compile(r"(?<![\w+])\+?(?:\(?\d{1,4}\)?[ .-]?){2,6}\d{2,4}(?![\w])"),
            _phone,
        ),
    )
}
