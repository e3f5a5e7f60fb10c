"""The analytics store: the recorded events folded into an embedded DuckDB
database, idempotent by event id and restart-safe (docs/analytics.md).

``schema`` (tables), ``views``, ``rows`` (event -> rows, never text), ``store`` (one
transaction per batch, offsets included), ``sink`` (the aiokafka consumer), ``load``
(a recorded log into a store), ``trace`` (``switchyard audit --json`` from the store),
``parquet`` (the tables as Parquet files), ``commands`` (``switchyard analytics``) and
``export_command`` (``switchyard export``: the recorded streams or the tables).
"""
