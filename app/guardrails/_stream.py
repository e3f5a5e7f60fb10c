"""Screening an answer while it streams: release text only once no rule can still
change it.

No find is longer than :data:`MAX_WIDTH` characters, so a find that ends
:data:`HOLD` characters before the end of the text received so far is settled: what
comes later cannot lengthen, shorten or undo it. The screen releases the text up to
that point (never into a find still open), redacted; a settled find of a ``block``
rule stops the stream, before any of its text is released. At the end the rest is
screened as a whole text would be, so what a stream released equals
:func:`app.guardrails.screen` of the whole answer, however the answer was cut into
pieces.
"""

from __future__ import annotations

from typing import Final

from app.guardrails._detectors import MAX_WIDTH
from app.guardrails._screen import Find, Rules, apply, blocking, find, fired

#: Characters held back at the end of the text received: a find's width and the
#: characters after it a rule may look at.
HOLD: Final = MAX_WIDTH + 8


class StreamScreen:
    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self._text = ""
        #: How much of the text received was released (or, once blocked, looked at).
        self._released = 0
        self._finds: list[Find] = []
        self.blocked: str | None = None

    @property
    def fired(self) -> tuple[str, ...]:
        return fired(self._finds, self.rules)

    def feed(self, text: str) -> str:
        """Take more of the answer; return what may be sent now."""
        self._text += text
        return self._release(final=False)

    def finish(self) -> str:
        """The answer ended: return the rest."""
        return self._release(final=True)

    def _release(self, *, final: bool) -> str:
        if self.blocked is not None or not self.rules:
            if self.blocked is None:
                out, self._released = self._text[self._released :], len(self._text)
                return out
            return ""
        settled_before = len(self._text) if final else len(self._text) - HOLD
        if settled_before <= self._released:
            return ""
        finds = find(self._text, self.rules, self._released)
        settled = [f for f in finds if f.end <= settled_before]
        self._finds += settled
        blocked = blocking(settled, self.rules)
        if blocked is not None:
            self.blocked = blocked
            return ""
        until = settled_before
        for open_find in finds:
            if open_find.start < until < open_find.end:
                until = open_find.start
        out = apply(self._text, settled, self.rules, self._released, until)
        self._released = until
        return out
