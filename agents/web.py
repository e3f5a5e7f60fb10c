"""The worker's HTTP views: Prometheus ``/metrics``, the probes ``/healthz`` and ``/readyz``,
the bandit statistics, traces.

None of them carries prompt or completion text. Who may read them: app/web_auth.py
(the probes open; ``/metrics`` open unless ``SWITCHYARD_METRICS_TOKEN`` is set; everything
under ``/admin`` behind ``SWITCHYARD_ADMIN_TOKEN``).
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import quote

from faust import web
from faust.web.drivers.aiohttp import Web as AiohttpWeb
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from agents.app import app, settings
from app.kafka import bootstrap_servers
from app.routing.budget import windows as budget_windows
from app.routing.budget_state import BudgetState
from app.routing.keys import KeyState
from app.routing.state import RouteState
from app.web_auth import admin_gate, admin_token, metrics_token
from app.worker.observe import RecordSensor, WorkerCollector, readiness
from tables.routing import all_route_states

# Before the server starts (aiohttp freezes its middlewares then): it covers Faust's own
# views too, whatever registers them.
cast(AiohttpWeb, app.web).web_app.middlewares.append(
    admin_gate(admin_token(settings), metrics_token(settings))
)
app.sensors.add(RecordSensor(settings.topics))
REGISTRY.register(WorkerCollector(app, all_route_states))


@app.page("/healthz")
class HealthView(web.View):
    """Alive: the worker's event loop answers (503 once it is stopping)."""

    async def get(self, request: web.Request) -> web.Response:
        if app.should_stop:
            return self.json({"status": "stopping"}, status=503)
        return self.json({"status": "ok"})


@app.page("/readyz")
class ReadyView(web.View):
    """Ready: partitions assigned and tables recovered (503 with the phase otherwise)."""

    async def get(self, request: web.Request) -> web.Response:
        ready, phase = readiness(app)
        return self.json({"status": phase}, status=200 if ready else 503)


@app.page("/metrics")
class MetricsView(web.View):
    async def get(self, request: web.Request) -> web.Response:
        return self.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])


def bandit_stats(states: dict[str, KeyState]) -> dict[str, Any]:
    """Per route and deployment: pulls, mean reward, alpha, beta, EMA latency, breaker."""
    return {
        route: {
            deployment: {
                "pulls": arm.pulls,
                "mean_reward": arm.mean_reward,
                "alpha": arm.alpha,
                "beta": arm.beta,
                "avg_latency_s": arm.avg_latency_s,
                "in_flight": arm.in_flight,
                "rate_limited": arm.rate_limited,
                "breaker": arm.breaker.state.value,
            }
            for deployment, arm in sorted(state.arms.items())
        }
        for route, state in sorted(states.items())
        if isinstance(state, RouteState)  # a budget's ledger: /admin/budgets
    }


@app.page("/admin/bandit/stats")
class BanditStatsView(web.View):
    async def get(self, request: web.Request) -> web.Response:
        return self.json(bandit_stats(_states()))


@app.page("/admin/budgets")
class BudgetsView(web.View):
    """Each budget's spend, holds, waiting asks and what remains, as the
    ledgers this worker folds hold them (a worker holds the ledgers of its partitions)."""

    async def get(self, request: web.Request) -> web.Response:
        from app.policy.holder import policy_holder

        limits = policy_holder().current.config.budget_by_key
        return self.json(budget_report(_states(), limits))


def _states() -> dict[str, KeyState]:
    """The rows, with the states folded since that are not written yet."""
    from agents.router import newest_states

    return {**all_route_states(), **newest_states()}


def budget_report(states: dict[str, KeyState], limits: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for key, state in sorted(states.items()):
        if not isinstance(state, BudgetState) or state.ledger is None:
            continue
        ledger = state.ledger
        scope = key.removeprefix("budget:")
        budget = limits.get(scope)
        held = ledger.held
        row: dict[str, Any] = {
            "day": ledger.in_window("day").label,
            "month": ledger.in_window("month").label,
            "held_usd": held.usd,
            "held_tokens": held.tokens,
            "held_requests": held.requests,
            "attempts_held": len(ledger.holds),
            "asks_waiting": len(ledger.waiting),
        }
        for shown in budget_windows(ledger, budget):
            suffix = f"{shown.window}_{shown.unit}"
            row[f"spent_{suffix}"] = shown.spent
            row[f"limit_{suffix}"] = shown.limit
            row[f"remaining_{suffix}"] = shown.remaining
        report[scope] = row
    return report


@app.page("/admin/routes")
class RoutesView(web.View):
    """Every path this worker serves, with its methods: Faust's views included."""

    async def get(self, request: web.Request) -> web.Response:
        return self.json({"routes": served_routes()})


def served_routes() -> list[dict[str, Any]]:
    methods: dict[str, set[str]] = {}
    for route in cast(AiohttpWeb, app.web).web_app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        methods.setdefault(path, set()).add(route.method)
    return [{"path": path, "methods": sorted(m)} for path, m in sorted(methods.items())]


@app.page("/admin/trace/{request_id}")
class TraceView(web.View):
    """``switchyard audit REQUEST_ID --json``, over HTTP. With a console
    (``SWITCHYARD_CONSOLE_URL``): a redirect to its store-backed trace, whose cost does not
    grow with the log; without one, read from the topics on each call."""

    async def get(self, request: web.Request, request_id: str) -> web.Response:
        if settings.console_url is not None:
            target = f"{settings.console_url}/admin/trace/{quote(request_id, safe='')}"
            return self.bytes(b"", status=307, headers={"Location": target})
        from app.audit.explain import also_read, build_trace
        from app.audit.log import read_broker

        log = await read_broker(
            bootstrap_servers(settings.broker),
            settings.topics,
            only_request=request_id,
            keep=also_read,
        )
        trace = build_trace(log, request_id)
        if trace is None:
            return self.json({"error": f"no record of request {request_id!r}"}, status=404)
        return self.json(trace)
