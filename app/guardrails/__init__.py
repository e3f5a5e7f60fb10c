"""Output guardrails: rules on the answers, applied by the executor before an answer is
recorded or sent — built-in detectors of personal data and secrets (e-mail addresses,
phone numbers, card numbers with their Luhn digit, IBANs with their checksum, API-key
shapes), keywords and bounded regular expressions; each rule blocks the answer, redacts
what it found, or flags it. A streamed answer is screened as it comes
(:class:`StreamScreen`): nothing of a blocked answer's text after the last settled
point is sent, and what a stream sent equals the whole answer screened.

Outcomes record the rules that fired (``name:action``), never the text.
"""

from app.guardrails._detectors import MAX_WIDTH, iban_valid, luhn_valid
from app.guardrails._screen import (
    Rules,
    RuleSpec,
    Screened,
    check_pattern,
    compile_rules,
    screen,
)
from app.guardrails._stream import HOLD, StreamScreen

__all__ = [
    "HOLD",
    "MAX_WIDTH",
    "RuleSpec",
    "Rules",
    "Screened",
    "StreamScreen",
    "check_pattern",
    "compile_rules",
    "iban_valid",
    "luhn_valid",
    "screen",
]
