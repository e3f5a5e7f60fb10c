"""Every Prometheus series the worker exports, defined once."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CIRCUIT_BREAKER_STATE = Gauge(
    "ai_circuit_breaker_state",
    "Seed 000 breaker state per provider: 0 CLOSED, 1 HALF_OPEN, 2 OPEN.",
    ["provider"],
)
BANDIT_CHOICE = Counter(
    "ai_bandit_choice_total",
    "Decisions per chosen provider and strategy.",
    ["provider", "strategy"],
)
REQUESTS = Counter(
    "switchyard_requests_total",
    "Records read from the requests topic, by result (accepted or a dead-letter reason).",
    ["result"],
)
OUTCOMES = Counter(
    "switchyard_outcomes_total",
    "Attempt outcomes by provider and status class.",
    ["provider", "status_class"],
)
RESPONSES = Counter(
    "switchyard_responses_total", "Responses published, by status.", ["status", "source"]
)
PROVIDER_LATENCY = Histogram(
    "switchyard_provider_latency_seconds",
    "Latency of provider calls as measured by the executor.",
    ["provider"],
    buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0),
)
ROUTER_EVENTS = Counter(
    "switchyard_router_events_total",
    "Routing-log events folded by the router, by type and whether they were applied.",
    ["type", "applied"],
)
SPILLED = Counter(
    "switchyard_spilled_dispatches_total",
    "Attempts the deciding worker had no room to call itself, sent to any worker's executors.",
)
ROUTER_RECALLS = Counter(
    "switchyard_router_recalls_total",
    "Waiting requests (line) and parked attempts (parked) the router read back from the "
    "routing log because its bounded memory did not hold them.",
    ["kind"],
)
ROUTE_WAITING = Gauge(
    "switchyard_route_waiting",
    "Requests of a route waiting for a deployment: in the log (line) or parked.",
    ["route", "kind"],
)
DECISION_SECONDS = Histogram(
    "switchyard_decision_seconds",
    "Time spent in the pure routing fold per event.",
    buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
)
TOKENS = Counter("switchyard_tokens_total", "Tokens by provider and kind.", ["provider", "kind"])
REFUSALS = Counter(
    "switchyard_refusals_total",
    "Requests answered with an error before any provider call, by code "
    "(forbidden_keyword, tenant_rate_limited, unknown_deployment, no_candidate ...).",
    ["code"],
)
DECISIONS_BY_DOMAIN = Counter(
    "switchyard_decisions_by_domain_total",
    "Decisions by detected domain and how it narrowed the candidates.",
    ["domain", "candidate_filter"],
)
COST_USD = Counter("switchyard_cost_usd_total", "Provider cost in USD.", ["provider"])
BUDGET_SPENT_USD = Gauge(
    "switchyard_budget_spent_usd",
    "A budget's spend in the current UTC day or month (issue 13), as its ledger folded it.",
    ["scope", "window"],
)
BUDGET_REMAINING_USD = Gauge(
    "switchyard_budget_remaining_usd",
    "A budget's limit minus its spend and what it holds for attempts in flight.",
    ["scope", "window"],
)
BUDGET_HELD_USD = Gauge(
    "switchyard_budget_held_usd",
    "Worst-case cost a budget holds for attempts in flight.",
    ["scope"],
)
JUDGE = Counter(
    "switchyard_judge_total",
    "The built-in judge (issue 10 §6) by result: answers requested, not_sampled, self, "
    "judge_request, too_large, ...; judge answers scored, unparseable, failed, late, not_judge; "
    "error (a judge step that went wrong, the answer unaffected).",
    ["result"],
)
