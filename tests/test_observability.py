"""The compose's observability, checked as far as this machine allows.

* ``promtool check config`` on the compose's scrape configuration;
* every metric the Grafana dashboard queries is defined (statically) and on a live
  worker's ``/metrics``;
* Debian's Prometheus (2.42, installed by .ci/run) scrapes a live worker, with a
  ``SWITCHYARD_METRICS_TOKEN`` as its bearer credential, and its HTTP API answers the
  breaker gauge, the choice counters, the latency histograms and every dashboard query.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import httpx
import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families
from stack_helpers import chat, collect, publish, warm_up

from app import metrics
from app.embedded.broker import EmbeddedBroker, free_port
from app.embedded.stack import EmbeddedStack
from app.lifetime import die_with_parent, stop_process

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "ops/grafana/dashboards/switchyard.json"
SCRAPE_CONFIG = ROOT / "ops/prometheus/prometheus.yml"
#: Series Prometheus makes itself, not the worker.
PROMETHEUS_OWN = {"up"}
METRICS_TOKEN = "metrics-token-for-tests"


class TP(NamedTuple):
    topic: str
    partition: int


SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
}


def tool(name: str) -> str:
    """A Debian tool .ci/run installs: a failure in CI, a skip on a machine without it."""
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (.ci/run installs Debian's prometheus)")
        pytest.skip(f"{name} is not installed (apt-get install prometheus)")
    return found


def dashboard_queries(rate_interval: str = "1m") -> list[str]:
    """Every PromQL expression of the dashboard, Grafana's ``$__rate_interval`` filled in."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return [expr.replace("$__rate_interval", rate_interval) for expr in exprs]


def queried_metrics(expr: str) -> set[str]:
    names = set(re.findall(r"\b(?:switchyard|ai)_[a-z0-9_]+\b", expr))
    return names | {name for name in PROMETHEUS_OWN if re.search(rf"\b{name}\b\s*[{{(\[]", expr)}


def sample_names(exposition: str) -> set[str]:
    """Every series name a ``/metrics`` text can show (a family's name and its suffixes)."""
    names = set()
    for family in text_string_to_metric_families(exposition):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
    return names


def test_promtool_accepts_the_compose_scrape_config() -> None:
    done = subprocess.run(
        [tool("promtool"), "check", "config", str(SCRAPE_CONFIG)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_the_dashboard_covers_the_issue_and_queries_only_defined_metrics() -> None:
    titles = " ".join(p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]).lower()
    for topic in ("requests per second", "success rate", "added latency", "provider latency",
                  "breaker state per deployment", "share per deployment", "cost per hour",
                  "dead letters", "consumer lag"):  # fmt: skip
        assert topic in titles
    defined = set(prometheus_client.REGISTRY._names_to_collectors) | metrics.COLLECTED_NAMES
    queried = set().union(*(queried_metrics(q) for q in dashboard_queries()))
    assert "ai_circuit_breaker_state" in queried and "switchyard_consumer_lag" in queried
    assert queried - PROMETHEUS_OWN <= defined, queried - PROMETHEUS_OWN - defined


class Prometheus:
    """Debian's Prometheus on a loopback port, scraping ``target`` every second."""

    def __init__(self, workdir: Path, target: str, token_file: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        job = {
            "job_name": "switchyard-workers",  # the compose's job name (the dashboard's `up`)
            "scrape_interval": "1s",
            "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
            "static_configs": [{"targets": [target]}],
        }
        config = workdir / "prometheus.yml"
        config.write_text(json.dumps({"scrape_configs": [job]}))  # JSON is YAML
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [tool("prometheus"), f"--config.file={config}",
                 f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
            )  # fmt: skip

    async def query(self, client: httpx.AsyncClient, promql: str) -> list[dict[str, Any]]:
        reply = await client.get(f"{self.url}/api/v1/query", params={"query": promql})
        body = reply.json()
        assert body["status"] == "success", (promql, body)
        return list(body["data"]["result"])

    async def until(
        self, client: httpx.AsyncClient, promql: str, timeout_s: float = 30.0
    ) -> list[dict[str, Any]]:
        """The query's result once it is not empty."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                result = await self.query(client, promql)
                if result:
                    return result
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                pytest.fail(f"no result for {promql}: {self.log.read_text()[-2000:]}")
            await asyncio.sleep(0.5)

    def stop(self) -> None:
        stop_process(self.process, 10)


def value(sample: dict[str, Any]) -> float:
    return float(sample["value"][1])


@pytest.mark.broker
async def test_prometheus_scrapes_a_live_worker(broker: EmbeddedBroker, tmp_path: Path) -> None:
    tool("prometheus")
    namespace = f"t{uuid.uuid4().hex[:8]}"
    token_file = tmp_path / "metrics-token"
    token_file.write_text(METRICS_TOKEN)
    env = {"SWITCHYARD_METRICS_TOKEN": METRICS_TOKEN}
    stack = EmbeddedStack(broker=broker, namespace=namespace, time_scale=0.05, seed=1, env=env)
    await stack.start()
    prometheus: Prometheus | None = None
    try:
        worker = stack.workers[0]
        await warm_up(stack)
        async with httpx.AsyncClient(timeout=10) as client:
            refused = await client.get(f"{worker.web_url}/metrics")
            assert refused.status_code == 401 and METRICS_TOKEN not in refused.text
            prometheus = Prometheus(tmp_path, worker.web_url.split("//")[1], token_file)
            up = await prometheus.until(client, 'up{job="switchyard-workers"} == 1')
            assert len(up) == 1
            # Traffic while Prometheus scrapes, so that rates and quantiles have a value.
            ids = [f"prom-{i}" for i in range(12)]
            await publish(stack, [chat(request_id) for request_id in ids])
            await collect(stack, {stack.topics.responses: 1 + len(ids)})
            await asyncio.sleep(2.5)  # two more scrapes
            exposition = await client.get(
                f"{worker.web_url}/metrics",
                headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
            )
            await _check_queries(client, prometheus, sample_names(exposition.text), stack)
    finally:
        if prometheus is not None:
            prometheus.stop()
        await stack.stop()


async def _check_queries(
    client: httpx.AsyncClient, prometheus: Prometheus, exported: set[str], stack: EmbeddedStack
) -> None:
    providers = set(stack.providers.base_urls())
    breakers = await prometheus.until(client, "ai_circuit_breaker_state")
    assert {b["metric"]["provider"] for b in breakers} <= providers
    assert all(value(b) in (0.0, 1.0, 2.0) for b in breakers)
    choices = await prometheus.until(client, "sum(ai_bandit_choice_total)")
    assert value(choices[0]) >= 13  # the warm-up and the twelve
    buckets = await prometheus.until(client, "switchyard_provider_latency_seconds_bucket")
    assert {b["metric"]["provider"] for b in buckets} <= providers
    rate = "rate(switchyard_provider_latency_seconds_bucket[1m])"
    p50 = await prometheus.until(client, f"histogram_quantile(0.5, sum by (le) ({rate}))")
    assert math.isfinite(value(p50[0])) and value(p50[0]) > 0
    deployments = await prometheus.until(client, "switchyard_deployment_breaker_state")
    assert {d["metric"]["route"] for d in deployments} == {"chat"}
    for query in dashboard_queries():
        await prometheus.query(client, query)  # valid PromQL that Prometheus evaluates
        missing = queried_metrics(query) - PROMETHEUS_OWN - exported
        assert not missing, f"{query}: {missing} not on /metrics"


class FakeConsumer:
    def __init__(self, high: dict[TP, int | None], read: dict[TP, int | None]) -> None:
        self.high = high
        self._read_offset = read

    def assignment(self) -> set[TP]:
        return set(self.high)

    def highwater(self, tp: TP) -> int | None:
        return self.high[tp]


def test_consumer_lag_counts_unread_records_of_work_partitions_only() -> None:
    from app.worker.observe import consumer_lags

    work, idle = TP("llm.requests", 0), TP("llm.requests", 1)
    fresh, unknown = TP("t", 0), TP("t", 1)
    changelog = TP("switchyard-route_state-changelog", 0)
    consumer = FakeConsumer(
        {work: 10, idle: 0, fresh: 5, unknown: None, changelog: 99},
        {work: 6, fresh: None, changelog: 3},
    )
    # 10 - (6 + 1) unread; an empty partition lags 0; unknown positions are left out.
    assert consumer_lags(consumer) == [("llm.requests", 0, 3), ("llm.requests", 1, 0)]


def test_readiness_needs_recovery_done_and_no_rebalance() -> None:
    from app.worker.observe import readiness

    class Completed:
        def __init__(self, done: bool) -> None:
            self.done = done

        def is_set(self) -> bool:
            return self.done

    def app(done: bool, rebalancing: bool = False, stopping: bool = False) -> Any:
        recovery = SimpleNamespace(completed=Completed(done))
        return SimpleNamespace(
            should_stop=stopping, rebalancing=rebalancing, in_recovery=False,
            tables=SimpleNamespace(recovery=recovery),
        )  # fmt: skip

    assert readiness(app(True)) == (True, "ready")
    assert readiness(app(False)) == (False, "starting")
    assert readiness(app(True, rebalancing=True)) == (False, "rebalancing")
    assert readiness(app(True, stopping=True)) == (False, "stopping")
