"""What the console's pages show, read from the analytics store (plain data, no HTML)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from app.analytics.store import Store
from app.routing.bandit import ema_latency

PAGE_SIZE = 50
#: Time buckets of the provider page's plots.
BUCKETS = 48
#: Outcomes that say nothing about a provider (as the router counts them: neutral).
NEUTRAL = ("expired", "client_error")
_SEVERITY = {"closed": 0, "half_open": 1, "open": 2}


def parse_time(text: str | None) -> datetime | None:
    """``2023-11-14T22:13`` (a datetime-local field, read as UTC) or a full ISO time."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LogFilters:
    status: str = ""
    tenant: str = ""
    route: str = ""
    deployment: str = ""
    since: str = ""
    until: str = ""

    @classmethod
    def of(cls, query: Mapping[str, str]) -> LogFilters:
        return cls(**{f.name: query.get(f.name, "").strip() for f in fields(cls)})

    def params(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    def where(self) -> tuple[str, list[Any]]:
        clauses, params = ["true"], []
        for name in ("status", "route"):
            if getattr(self, name):
                clauses.append(f"{name} = ?")
                params.append(getattr(self, name))
        if self.tenant == "(none)":
            clauses.append("tenant IS NULL")
        elif self.tenant:
            clauses.append("tenant = ?")
            params.append(self.tenant)
        if self.deployment:
            clauses.append("list_contains(deployments, ?)")
            params.append(self.deployment)
        for name, op in (("since", ">="), ("until", "<=")):
            moment = parse_time(getattr(self, name))
            if moment is not None:
                clauses.append(f"accepted_at {op} ?")
                params.append(moment)
        return " AND ".join(clauses), params

    def without_times(self) -> LogFilters:
        return replace(self, since="", until="")


@dataclass(frozen=True)
class LogPage:
    rows: list[dict[str, Any]]
    total: int
    page: int
    pages: int


def filter_options(store: Store) -> dict[str, list[str]]:
    def distinct(sql: str) -> list[str]:
        return [str(row[0]) for row in store.query(sql)]

    return {
        "status": ["ok", "error", "pending"],
        "tenant": [
            "(none)",
            *distinct("SELECT DISTINCT tenant FROM requests WHERE tenant IS NOT NULL ORDER BY 1"),
        ],
        "route": distinct("SELECT DISTINCT route FROM requests ORDER BY 1"),
        "deployment": distinct("SELECT DISTINCT deployment FROM decisions ORDER BY 1"),
    }


def _records(store: Store, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """The rows of ``sql`` as dicts by column name."""
    cursor = store.cursor().execute(sql, list(params))
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def request_log(store: Store, filters: LogFilters, page: int) -> LogPage:
    where, params = filters.where()
    total = int(store.query(f"SELECT count(*) FROM request_log WHERE {where}", params)[0][0])
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(max(page, 1), pages)
    rows = _records(
        store,
        f"SELECT * FROM request_log WHERE {where} ORDER BY accepted_at DESC, request_id "
        "LIMIT ? OFFSET ?",
        [*params, PAGE_SIZE, (page - 1) * PAGE_SIZE],
    )
    return LogPage(rows, total, page, pages)


def request_summary(store: Store, request_id: str) -> dict[str, Any] | None:
    cursor = store.cursor().execute("SELECT * FROM request_log WHERE request_id = ?", [request_id])
    names = [d[0] for d in cursor.description or ()]
    row = cursor.fetchone()
    summary = None if row is None else dict(zip(names, row, strict=True))
    tenant = store.query("SELECT tenant FROM requests WHERE request_id = ? LIMIT 1", [request_id])
    if summary is not None:
        summary["tenant"] = tenant[0][0] if tenant else None
    return summary


# --------------------------------------------------------------------------- providers


def span(store: Store, hours: float | None) -> tuple[datetime, datetime] | None:
    """The window: the last ``hours`` before the store's latest decision or outcome (all: None)."""
    first, last = _bounds(store)
    if first is None or last is None:
        return None
    if hours:
        first = max(first, last - timedelta(hours=hours))
    return first, last


def _bounds(store: Store) -> tuple[datetime | None, datetime | None]:
    row = store.query(
        "SELECT least(a, c), greatest(b, d) FROM "
        "(SELECT min(occurred_at) AS a, max(occurred_at) AS b FROM decisions), "
        "(SELECT min(occurred_at) AS c, max(occurred_at) AS d FROM outcomes)"
    )[0]
    return row[0], row[1]


def provider_health(store: Store, window: tuple[datetime, datetime]) -> list[dict[str, Any]]:
    rows = _records(
        store,
        """
        SELECT route, deployment, count(*) AS attempts,
               count(*) FILTER (WHERE status_class = 'success') AS successes,
               count(*) FILTER (WHERE status_class NOT IN ('expired', 'client_error')) AS counted,
               quantile_cont(latency_ms, 0.5) AS p50_ms, quantile_cont(latency_ms, 0.95) AS p95_ms,
               sum(cost_usd) AS cost_usd, sum(tokens_in + tokens_out) AS tokens,
               count(*) / sum(count(*)) OVER (PARTITION BY route) AS share,
               mode(status_class) FILTER (WHERE status_class <> 'success') AS top_failure
        FROM outcomes WHERE occurred_at BETWEEN ? AND ?
        GROUP BY route, deployment ORDER BY route, deployment
        """,
        list(window),
    )
    emas = _latency_emas(store, window)
    states = _breaker_now(store, window)
    for row in rows:
        key = (row["route"], row["deployment"])
        row["success_rate"] = row["successes"] / row["counted"] if row["counted"] else None
        row["latency_ema_ms"] = emas.get(key)
        row["breaker"] = states.get(key)
    return rows


def _latency_emas(store: Store, window: tuple[datetime, datetime]) -> dict[tuple[str, str], float]:
    """The router's latency EMA (20 % newest), recomputed from the window's last outcomes."""
    rows = store.query(
        f"""
        SELECT route, deployment, latency_ms FROM outcomes
        WHERE occurred_at BETWEEN ? AND ? AND status_class NOT IN {NEUTRAL}
        QUALIFY row_number() OVER (PARTITION BY route, deployment
                                   ORDER BY occurred_at DESC, kafka_offset DESC) <= 200
        ORDER BY route, deployment, occurred_at, kafka_offset
        """,
        list(window),
    )
    emas: dict[tuple[str, str], float] = {}
    seen: dict[tuple[str, str], int] = {}
    for route, deployment, latency in rows:
        key = (route, deployment)
        emas[key] = ema_latency(emas.get(key, 0.0), latency, seen.get(key, 0))
        seen[key] = seen.get(key, 0) + 1
    return emas


def _breaker_now(store: Store, window: tuple[datetime, datetime]) -> dict[tuple[str, str], str]:
    rows = store.query(
        "SELECT route, deployment, arg_max(state, occurred_at) FROM breaker_observations "
        "WHERE occurred_at BETWEEN ? AND ? GROUP BY ALL",
        list(window),
    )
    return {(route, deployment): state for route, deployment, state in rows}


def _bucketing(window: tuple[datetime, datetime]) -> tuple[list[datetime], float]:
    first, last = window
    width = max((last - first).total_seconds() / BUCKETS, 0.001)
    return [first + timedelta(seconds=i * width) for i in range(BUCKETS)], width


def share_series(
    store: Store, window: tuple[datetime, datetime]
) -> tuple[list[datetime], dict[str, list[int]]]:
    """Attempts per deployment per time bucket (decisions: where requests were sent)."""
    buckets, width = _bucketing(window)
    rows = store.query(
        "SELECT least(floor(epoch(occurred_at - ?::TIMESTAMPTZ) / ?)::INTEGER, ?) AS b, "
        "deployment, count(*) FROM decisions WHERE occurred_at BETWEEN ? AND ? GROUP BY ALL",
        [window[0], width, BUCKETS - 1, *window],
    )
    counts: dict[str, list[int]] = {}
    for bucket, deployment, count in rows:
        counts.setdefault(deployment, [0] * BUCKETS)[bucket] += count
    return buckets, counts


def breaker_series(
    store: Store, window: tuple[datetime, datetime]
) -> tuple[list[datetime], dict[str, list[str | None]]]:
    """The worst breaker state each deployment showed in each bucket (None: not seen)."""
    buckets, width = _bucketing(window)
    rows = store.query(
        "SELECT least(floor(epoch(occurred_at - ?::TIMESTAMPTZ) / ?)::INTEGER, ?) AS b, "
        "deployment, max(CASE state WHEN 'open' THEN 2 WHEN 'half_open' THEN 1 ELSE 0 END) "
        "FROM breaker_observations WHERE occurred_at BETWEEN ? AND ? GROUP BY ALL",
        [window[0], width, BUCKETS - 1, *window],
    )
    names = {v: k for k, v in _SEVERITY.items()}
    lanes: dict[str, list[str | None]] = {}
    for bucket, deployment, severity in rows:
        lanes.setdefault(deployment, [None] * BUCKETS)[bucket] = names[severity]
    return buckets, lanes


# --------------------------------------------------------------------------- policies


_POLICY_VERSIONS = (
    "SELECT version, hash, source, min(occurred_at) AS first_at, "
    "list(DISTINCT route ORDER BY route) AS routes, count(*) AS changes "
    "FROM policy_changes GROUP BY version, hash, source ORDER BY version DESC"
)
_CONFIG_HASHES = (
    "SELECT config_hash, policy_version, strategy, count(*) AS decisions, "
    "min(occurred_at) AS first_at, max(occurred_at) AS last_at FROM decisions "
    "GROUP BY ALL ORDER BY first_at DESC"
)


def policy_versions(store: Store) -> list[dict[str, Any]]:
    return _records(store, _POLICY_VERSIONS)


def config_hashes(store: Store) -> list[dict[str, Any]]:
    """What the decisions say they were made under, by config hash and policy version."""
    return _records(store, _CONFIG_HASHES)
