"""Guardrails on text: rules on the answers, applied by the executor before an answer is
recorded or sent, and on the requests' messages (ingest refuses a request a rule blocks;
the executor sends the provider the messages redacted). A rule looks for built-in shapes
of personal data and secrets (e-mail addresses, phone numbers, card numbers with their
Luhn digit, IBANs with their checksum, API keys), keywords and bounded regular
expressions, and blocks, redacts what it found, or flags it. A streamed answer is
screened as it comes (:class:`StreamScreen`): nothing of a blocked answer's text is
sent, and what a stream sent equals the whole answer screened.

Outcomes and accepted requests record the rules that fired (``name:action``), never the
text.
"""

from app.guardrails._detectors import MAX_WIDTH, iban_valid, luhn_valid
from app.guardrails._messages import redact_messages, screen_messages
from app.guardrails._screen import (
    Rules,
    RuleSpec,
    Screened,
    check_pattern,
    compile_rules,
    rules_for,
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
    "redact_messages",
    "rules_for",
    "screen",
    "screen_messages",
]
