"""Request understanding (issue 6): pure functions that read a request before routing.

* :mod:`~app.understanding.features` — seed 000 §8's contextual features;
* :mod:`~app.understanding.domains` — seed 000 §6's 15 domains and specialist filtering;
* :mod:`~app.understanding.modes` — seed 004's routing modes, model-id suffixes and pinning;
* :mod:`~app.understanding.guardrails` — seed 000 §9 step 3: forbidden keywords;
* :mod:`~app.understanding.patterns`, :mod:`~app.understanding.rules`,
  :mod:`~app.understanding.text` — the rule tables, their fast compiled form, folding.

Nothing here reads a clock, an environment variable or an unseeded generator, and
nothing returns prompt text: only labels, counts and configured keywords.
"""
