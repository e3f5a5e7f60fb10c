"""The worker's runtime under the agents: Faust patches and broker plumbing.

* :mod:`~app.worker.faust_app`: the worker's Faust application, built by a factory
  when a worker starts (agents, tables and views register on it).
* :mod:`~app.worker.intake`: taking one record of an input topic, or dead-lettering it.
* Faust, patched: :mod:`~app.worker.fast_delivery` (a record to its stream without
  four tasks), :mod:`~app.worker.flow_control` (no records dropped on a resume),
  :mod:`~app.worker.quiet_monitor` (no per-record bookkeeping),
  :mod:`~app.worker.seek_start` (a partition nobody committed read from its start).
* The broker: :mod:`~app.worker.acks` (acks in offset order),
  :mod:`~app.worker.local_log` (records this worker wrote, folded before the broker
  delivers them), :mod:`~app.worker.recall` (reading the routing log back),
  :mod:`~app.worker.transactions` (exactly-once writers) and
  :mod:`~app.worker.read_committed` (Faust's consumer and recovery under them).
* :mod:`~app.worker.observe`: the worker's sensor and collectors for the dashboard.

Nothing here knows a route or a request: the agents (``agents/``) bind topics to the
routing, execution and grading services and use these.
"""
