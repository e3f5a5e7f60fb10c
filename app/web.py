"""The worker's HTTP views: Prometheus ``/metrics``, seed 000's bandit statistics, traces."""

from __future__ import annotations

from typing import Any

from faust import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.faust_app import app, settings
from app.kafka import bootstrap_servers
from app.routing.state import RouteState
from tables.routing import all_route_states


@app.page("/metrics")
class MetricsView(web.View):
    async def get(self, request: web.Request) -> web.Response:
        return self.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])


def bandit_stats(states: dict[str, RouteState]) -> dict[str, Any]:
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
    }


@app.page("/admin/bandit/stats")
class BanditStatsView(web.View):
    async def get(self, request: web.Request) -> web.Response:
        return self.json(bandit_stats(all_route_states()))


@app.page("/admin/trace/{request_id}")
class TraceView(web.View):
    """``switchyard audit REQUEST_ID --json``, over HTTP: read from the topics on each call."""

    async def get(self, request: web.Request, request_id: str) -> web.Response:
        from app.audit.explain import build_trace
        from app.audit.log import read_broker

        log = await read_broker(
            bootstrap_servers(settings.broker), settings.topics, only_request=request_id
        )
        trace = build_trace(log, request_id)
        if trace is None:
            return self.json({"error": f"no record of request {request_id!r}"}, status=404)
        return self.json(trace)
