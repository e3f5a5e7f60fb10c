"""The worker's HTTP views: Prometheus ``/metrics`` and seed 000's bandit statistics."""

from __future__ import annotations

from typing import Any

from faust import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.faust_app import app
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
