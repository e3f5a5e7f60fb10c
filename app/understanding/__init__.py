"""Request understanding: pure functions that read a request before routing
(docs/design.md#routing, steps 1-5).

* :mod:`~app.understanding.features` — the contextual features;
* :mod:`~app.understanding.domains` — the 15 domains and specialist filtering;
* :mod:`~app.understanding.modes` — routing modes, model-id suffixes and pinning;
* :mod:`~app.understanding.guardrails` — guardrails: forbidden keywords;
* :mod:`~app.understanding.patterns`, :mod:`~app.understanding.rules`,
  :mod:`~app.understanding.text` — the rule tables, their fast compiled form, folding.

Nothing here reads a clock, an environment variable or an unseeded generator, and
nothing returns prompt text: only labels, counts and configured keywords.
"""
