"""``switchyard export --format parquet``: the analytics store's tables as Parquet files."""

from __future__ import annotations

from pathlib import Path

from app.analytics.load import fold_log
from app.analytics.store import Store
from app.audit.log import RecordedLog
from app.settings import Topics


def write_parquet_export(
    log: RecordedLog | None, directory: Path, topics: Topics, store_path: Path | None = None
) -> dict[str, int]:
    """``--format parquet``: the analytics store's tables (app/analytics/), one
    ``TABLE.parquet`` each, from ``store_path`` (a store file the sink filled) or folded
    from ``log`` into a store in memory, exactly as the sink folds the topics. Never
    prompt or completion text: the store holds none. Returns the row counts."""
    store = Store(store_path, read_only=True) if store_path is not None else Store()
    try:
        if store_path is None:
            assert log is not None
            fold_log(store, log, topics)
        return store.export_parquet(directory)
    finally:
        store.close()
