"""The analytics store's views: what analysts and the console ask most.

* ``request_log``: one row per accepted request (its first acceptance), with its
  final response, attempts, deployments tried, cost and latency;
* ``deployment_hourly``: per hour, route and deployment: requests (attempts sent
  to it), successes, success rate, latency percentiles, tokens, cost, and its share
  of the route's attempts in that hour;
* ``tenant_spend``: per tenant and day: requests, attempts, tokens and cost;
* ``breaker_observations``: what each decision saw of each deployment's breaker
  (``closed``: a candidate; ``half_open``: its probe was chosen or its probe slots
  were busy; ``open``: excluded by the breaker), the breaker timeline's input;
* ``decision_candidates`` and ``decision_exclusions``: the decisions' candidate and
  exclusion lists, one row each (factors stay a JSON map).
"""

from __future__ import annotations

import duckdb

_CANDIDATE = '[{"deployment": "VARCHAR", "score": "DOUBLE", "factors": "JSON"}]'
_EXCLUSION = '[{"deployment": "VARCHAR", "reason": "VARCHAR"}]'

VIEWS: dict[str, str] = {
    "decision_candidates": f"""
        SELECT d.id AS decision_id, d.request_id, d.attempt, d.route, d.occurred_at,
               c.deployment, c.score, c.factors, c.deployment = d.deployment AS chosen
        FROM decisions d,
             unnest(from_json(d.candidates, '{_CANDIDATE}')) AS u(c)
    """,
    "decision_exclusions": f"""
        SELECT d.id AS decision_id, d.request_id, d.attempt, d.route, d.occurred_at,
               e.deployment, e.reason
        FROM decisions d,
             unnest(from_json(d.excluded, '{_EXCLUSION}')) AS u(e)
    """,
    "breaker_observations": """
        SELECT occurred_at, route, deployment,
               CASE WHEN chosen AND selection_rule = 'half_open_probe' THEN 'half_open'
                    ELSE 'closed' END AS state
        FROM (SELECT c.*, d.selection_rule FROM decision_candidates c
              JOIN decisions d ON d.id = c.decision_id)
        UNION ALL
        SELECT occurred_at, route, deployment,
               CASE WHEN reason = 'breaker_open' THEN 'open' ELSE 'half_open' END AS state
        FROM decision_exclusions WHERE reason LIKE 'breaker%'
    """,
    "request_log": """
        WITH accepted AS (
            SELECT * FROM requests
            QUALIFY row_number() OVER (
                PARTITION BY request_id ORDER BY kafka_partition, kafka_offset) = 1
        ), answered AS (
            SELECT * FROM responses
            QUALIFY row_number() OVER (
                PARTITION BY request_id ORDER BY kafka_partition, kafka_offset) = 1
        ), decided AS (
            SELECT request_id, count(DISTINCT attempt) AS decisions,
                   list(DISTINCT deployment ORDER BY deployment) AS deployments
            FROM decisions GROUP BY request_id
        ), spent AS (
            SELECT request_id, sum(cost_usd) AS cost_usd, sum(latency_ms) AS latency_ms,
                   sum(tokens_in) AS tokens_in, sum(tokens_out) AS tokens_out
            FROM outcomes GROUP BY request_id
        )
        SELECT a.request_id, a.occurred_at AS accepted_at, a.route, a.tenant,
               coalesce(r.status, 'pending') AS status,
               coalesce(r.attempts, d.decisions, 0) AS attempts,
               r.deployment, coalesce(d.deployments, []) AS deployments,
               r.error_type, s.cost_usd, s.latency_ms, s.tokens_in, s.tokens_out,
               r.occurred_at AS answered_at,
               date_diff('millisecond', a.occurred_at, r.occurred_at) AS duration_ms,
               a.prompt_chars
        FROM accepted a
        LEFT JOIN answered r USING (request_id)
        LEFT JOIN decided d USING (request_id)
        LEFT JOIN spent s USING (request_id)
    """,
    "deployment_hourly": """
        SELECT hour, route, deployment, requests, successes,
               successes / requests AS success_rate,
               latency_p50_ms, latency_p95_ms, latency_p99_ms,
               tokens_in, tokens_out, cost_usd,
               requests / sum(requests) OVER (PARTITION BY hour, route) AS share
        FROM (
            SELECT date_trunc('hour', occurred_at) AS hour, route, deployment,
                   count(*) AS requests,
                   count(*) FILTER (WHERE status_class = 'success') AS successes,
                   quantile_cont(latency_ms, 0.5) AS latency_p50_ms,
                   quantile_cont(latency_ms, 0.95) AS latency_p95_ms,
                   quantile_cont(latency_ms, 0.99) AS latency_p99_ms,
                   sum(tokens_in) AS tokens_in, sum(tokens_out) AS tokens_out,
                   sum(cost_usd) AS cost_usd
            FROM outcomes GROUP BY ALL
        )
    """,
    "tenant_spend": """
        SELECT date_trunc('day', o.occurred_at) AS day,
               coalesce(q.tenant, '(none)') AS tenant,
               count(DISTINCT o.request_id) AS requests, count(*) AS attempts,
               sum(o.tokens_in) AS tokens_in, sum(o.tokens_out) AS tokens_out,
               sum(o.cost_usd) AS cost_usd
        FROM outcomes o
        LEFT JOIN (SELECT request_id, any_value(tenant) AS tenant
                   FROM requests GROUP BY request_id) q USING (request_id)
        GROUP BY ALL
    """,
}


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    for name, sql in VIEWS.items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")


def link_decisions(con: duckdb.DuckDBPyConnection, routes: set[str]) -> None:
    """Set ``previous_state_version`` (the route's previous decision, -1: none) of every
    decision of ``routes`` that a new one may have changed: those above the highest state
    version below the new decisions' lowest (decisions can arrive out of order). Made in
    the inserting transaction, so the trace reads it with a lookup instead of a scan."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _previous AS
        WITH fresh AS (
            SELECT route, min(state_version) AS low FROM decisions
            WHERE previous_state_version IS NULL AND list_contains(?, route) GROUP BY route
        ), floors AS (
            SELECT f.route, coalesce(max(d.state_version), -1) AS floor
            FROM fresh f LEFT JOIN decisions d ON d.route = f.route AND d.state_version < f.low
            GROUP BY f.route
        ), versions AS (
            SELECT DISTINCT d.route, d.state_version, f.floor FROM decisions d
            JOIN floors f ON d.route = f.route AND d.state_version >= f.floor
        )
        SELECT route, state_version, previous FROM (
            SELECT route, state_version, floor,
                   lag(state_version, 1, -1) OVER (PARTITION BY route ORDER BY state_version)
                       AS previous
            FROM versions
        ) WHERE state_version > floor
        """,
        [sorted(routes)],
    )
    con.execute(
        "UPDATE decisions SET previous_state_version = p.previous FROM _previous p "
        "WHERE decisions.route = p.route AND decisions.state_version = p.state_version "
        "AND decisions.previous_state_version IS DISTINCT FROM p.previous"
    )
    con.execute("DROP TABLE _previous")
