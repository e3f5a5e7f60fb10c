"""Replay and audit: the recorded topics as evidence.

* :mod:`app.audit.log` reads the routing log, decisions, outcomes and responses
  from a broker or from an export directory into an ordered in-memory log.
* :mod:`app.audit.replay` folds the routing log with the live router's own
  :func:`app.routing.fold.handle` and compares every re-derived decision with
  the recorded one; :mod:`app.audit.replay_fold` is its fold loop, shared with the
  parallel replay.
* :mod:`app.audit.replay_parallel` (``replay --jobs N``) folds independent routes in
  worker processes: :mod:`~app.audit.routing_scan` and :mod:`~app.audit.replay_source`
  read the log as texts in the parent, :mod:`~app.audit.replay_worker` and
  :mod:`~app.audit.replay_compare` fold and compare in a worker
  (:mod:`~app.audit.replay_tasks`: what they send each other;
  :mod:`~app.audit.record_keys`: keys and ids read from texts), and
  :mod:`~app.audit.replay_merge` builds the report from their results.
* :mod:`app.audit.counterfactual` folds the recorded requests under another
  policy, with outcomes taken from the record where they were observed and
  estimated (and labelled so) where they were not.
* :mod:`app.audit.explain` renders one request's attempts for a person or a tool.
* :mod:`app.audit.export` writes the log as JSON Lines that ``replay`` reads back.
"""
