"""Every Prometheus series the worker exports, defined once."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CIRCUIT_BREAKER_STATE = Gauge(
    "ai_circuit_breaker_state",
    "Circuit breaker state per provider: 0 CLOSED, 1 HALF_OPEN, 2 OPEN.",
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
ACKS_HELD = Gauge(
    "switchyard_acks_held",
    "Events an agent that acks by hand (router, handoff, spill) has received and not acked: "
    "in work, or waiting for an earlier event of their partition (app/worker/acks.py). A count "
    "that only grows means a partition's commits are stuck.",
    ["agent"],
)
ROUTER_LOCAL_FOLDS = Counter(
    "switchyard_router_local_folds_total",
    "Routing-log records the router folded as soon as the broker acknowledged them, "
    "written by this worker, before the broker delivered them back.",
)
CALLS_AHEAD = Counter(
    "switchyard_calls_ahead_total",
    "Calls started while their request's routing-log record was on its way to the "
    "broker, by verdict: claimed (the router's fold decided the same call) or taken_back "
    "(it did not: the call was made for nothing).",
    ["verdict"],
)
ROUTER_RECALLS = Counter(
    "switchyard_router_recalls_total",
    "Waiting requests (line), parked attempts (parked) and cached answers (cached) the "
    "router read back from the routing log because its bounded memory did not hold them.",
    ["kind"],
)
CACHE_HITS = Counter(
    "switchyard_cache_hits_total",
    "Requests answered from their route's response cache (no provider called), by kind "
    "(exact or semantic).",
    ["route", "kind"],
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
REGION_REFUSALS = Counter(
    "switchyard_region_refusals_total",
    "Calls a provider refused for the region the request came from (403): not failures.",
    ["provider"],
)
BUDGET_SPENT_USD = Gauge(
    "switchyard_budget_spent_usd",
    "A budget's spend in the current UTC minute, hour, day or month, as its ledger folded it.",
    ["scope", "window"],
)
BUDGET_SPENT = Gauge(
    "switchyard_budget_spent",
    "Requests or tokens a budget counted in the current UTC window (those it limits).",
    ["scope", "window", "unit"],
)
BUDGET_REMAINING = Gauge(
    "switchyard_budget_remaining",
    "A budget's limit of requests or tokens minus its count and what it holds in flight.",
    ["scope", "window", "unit"],
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
    "The built-in judge by result: answers requested, not_sampled, self, "
    "judge_request, too_large, ...; judge answers scored, unparseable, failed, late, not_judge; "
    "error (a judge step that went wrong, the answer unaffected).",
    ["result"],
)

# -- What the dashboard (ops/grafana/) needs beyond the agents' own counters.
# Observed by a Faust sensor (app/worker/observe.py), for every record, without reading it.
RECORD_AGE = Histogram(
    "switchyard_record_age_seconds",
    "Time from a record's write (its Kafka timestamp) to a worker reading it, by stream "
    "(requests, routing, dispatch, ...): the hops the router adds before a provider call.",
    ["stream"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0),
)
DEADLETTERS = Counter(
    "switchyard_deadletters_total",
    "Records a worker sent to the dead-letter topic (ingest and feedback; reasons of "
    "requests in switchyard_requests_total).",
)

#: Collected when ``/metrics`` is read (app/worker/observe.py), from the consumer's positions and
#: the route-state rows this worker holds: (name, help).
CONSUMER_LAG = (
    "switchyard_consumer_lag",
    "Records of an assigned partition not yet read by this worker (high watermark minus "
    "position), by topic and partition.",
)
DEPLOYMENT_BREAKER = (
    "switchyard_deployment_breaker_state",
    "Breaker state per route and deployment (provider:model) as of the route's last written "
    "row: 0 CLOSED, 1 HALF_OPEN, 2 OPEN.",
)
DEPLOYMENT_ATTEMPTS = (
    "switchyard_deployment_attempts",
    "Finished attempts per route and deployment (the bandit's pulls) in the route's state "
    "(a counter: its rate is the deployment's share of traffic).",
)
#: Names of the series the scrape-time collector exports (dashboard checks).
COLLECTED_NAMES = frozenset(
    {CONSUMER_LAG[0], DEPLOYMENT_BREAKER[0], DEPLOYMENT_ATTEMPTS[0] + "_total"}
)


def consumer_lag_family(lags: Iterable[tuple[str, int, int]]) -> GaugeMetricFamily:
    """``(topic, partition, lag)`` rows as the ``switchyard_consumer_lag`` gauge."""
    family = GaugeMetricFamily(*CONSUMER_LAG, labels=["topic", "partition"])
    for topic, partition, lag in lags:
        family.add_metric([topic, str(partition)], float(lag))
    return family


def deployment_families(
    rows: Iterable[tuple[str, str, float, int]],
) -> tuple[GaugeMetricFamily, CounterMetricFamily]:
    """``(route, deployment, breaker gauge value, attempts)`` rows: a gauge and a counter."""
    breaker = GaugeMetricFamily(*DEPLOYMENT_BREAKER, labels=["route", "deployment"])
    attempts = CounterMetricFamily(*DEPLOYMENT_ATTEMPTS, labels=["route", "deployment"])
    for route, deployment, state, pulls in rows:
        breaker.add_metric([route, deployment], state)
        attempts.add_metric([route, deployment], float(pulls))
    return breaker, attempts
