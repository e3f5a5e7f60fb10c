"""Replay and audit: the recorded topics as evidence.

* :mod:`app.audit.log` reads the routing log, decisions, outcomes and responses
  from a broker or from an export directory into an ordered in-memory log.
* :mod:`app.audit.replay` folds the routing log with the live router's own
  :func:`app.routing.fold.handle` and compares every re-derived decision with
  the recorded one.
* :mod:`app.audit.counterfactual` folds the recorded requests under another
  policy, with outcomes taken from the record where they were observed and
  estimated (and labelled so) where they were not.
* :mod:`app.audit.explain` renders one request's attempts for a person or a tool.
* :mod:`app.audit.export` writes the log as JSON Lines that ``replay`` reads back.
"""
