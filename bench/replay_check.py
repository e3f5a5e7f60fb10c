"""The replay every chaos bench ends with: the whole log re-folded, compared, summarised."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when called: `switchyard` imports the benches at every start
    from app.embedded.stack import EmbeddedStack


async def replay_whole_log(
    stack: EmbeddedStack, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Replay the stack's whole log (committed records) under its providers file and the
    routing parameters of ``env`` (the workers'); print the first mismatches."""
    from app.audit.log import read_broker
    from app.audit.replay import replay
    from app.policy.files import load_config
    from app.routing.params import RoutingParams
    from app.routing.policy import Policy
    from bench.cluster_report import replay_summary

    log = await read_broker(stack.broker.bootstrap, stack.topics, timeout_s=300.0)
    params = RoutingParams(**(env or {}))  # type: ignore[arg-type]  # aliases, as workers read them
    policy = Policy(config=load_config(stack.providers_file, env={}), params=params)
    report = replay(log, policy, allow_pending=True)
    for mismatch in report.mismatches[:5]:
        print(
            f"  replay {mismatch.kind} {mismatch.record} {mismatch.request_id}#{mismatch.attempt}"
            f": {'; '.join(mismatch.differences[:3])}"
        )
    return replay_summary(report.to_json(limit=5))
