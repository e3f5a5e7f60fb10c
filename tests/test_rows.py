"""A route's row (app/routing/rows.py): the JSON the pydantic state wrote, both ways."""

from __future__ import annotations

import json

import orjson

from app.routing.rows import dumps, from_row, loads, to_row
from app.routing.state import ArmState, BreakerPhase, RouteState

#: A row written by the pydantic ``RouteState.model_dump(mode="json")`` (before rows had
#: their own codec), every field away from its default: arms with breaker, recent sums and evidence
#: buckets, open and parked attempts, watermarks, a tenant's rate window, the line,
#: pacers and grade ids.
PYDANTIC_ROW = (
    '{"clock":1700000123.456789,"position":4242,"arms":{"a:m1":{"pulls":17,"total_reward":12.'
    '75,"alpha":13.0,"beta":6.0,"avg_latency_s":0.8123456789,"latency_samples":16,"in_flight"'
    ':2,"rate_limited":1,"retry_after_until":1700000130.5,"breaker":{"state":"HALF_OPEN","fai'
    'lures":3,"last_failure_time":1700000100.25,"success_count":1},"ewma_failure":0.123456789'
    '0123,"ewma_latency_ms":812.3456,"observations":17,"tokens_per_s":61.5,"throughput_sample'
    's":12,"recent":{"at":1700000120.0,"slow":{"calls":9.5,"failures":1.25,"answers":8.0,"rew'
    'ard":7.5,"latency_s":6.125},"fast":{"calls":3.0,"failures":0.5,"answers":2.5,"reward":2.'
    '0,"latency_s":1.75}},"evidence":{"*":{"answers":12,"graded":5,"weight":4.5,"score":3.25,'
    '"square":2.5,"wins":3.0,"costed":12,"cost_usd":0.0123,"tokens_in":480.0,"tokens_out":144'
    '0.0},"code":{"answers":3,"graded":1,"weight":1.0,"score":0.75,"square":0.5625,"wins":1.0'
    ',"costed":0,"cost_usd":0.0,"tokens_in":0.0,"tokens_out":0.0}}},"b:m1":{"pulls":0,"total_'
    'reward":0.0,"alpha":1.0,"beta":1.0,"avg_latency_s":5.0,"latency_samples":0,"in_flight":0'
    ',"rate_limited":0,"retry_after_until":0.0,"breaker":{"state":"OPEN","failures":5,"last_f'
    'ailure_time":1500000000.0,"success_count":0},"ewma_failure":0.0,"ewma_latency_ms":0.0,"o'
    'bservations":0,"tokens_per_s":50.0,"throughput_samples":0,"recent":{"at":0.0,"slow":{"ca'
    'lls":0.0,"failures":0.0,"answers":0.0,"reward":0.0,"latency_s":0.0},"fast":{"calls":0.0,'
    '"failures":0.0,"answers":0.0,"reward":0.0,"latency_s":0.0}},"evidence":{}},"c:m1":{"pull'
    's":0,"total_reward":0.0,"alpha":1.0,"beta":1.0,"avg_latency_s":5.0,"latency_samples":0,"'
    'in_flight":0,"rate_limited":0,"retry_after_until":0.0,"breaker":{"state":"CLOSED","failu'
    'res":0,"last_failure_time":0.0,"success_count":0},"ewma_failure":0.0,"ewma_latency_ms":0'
    '.0,"observations":0,"tokens_per_s":50.0,"throughput_samples":0,"recent":{"at":0.0,"slow"'
    ':{"calls":0.0,"failures":0.0,"answers":0.0,"reward":0.0,"latency_s":0.0},"fast":{"calls"'
    ':0.0,"failures":0.0,"answers":0.0,"reward":0.0,"latency_s":0.0}},"evidence":{}}},"open_a'
    'ttempts":{"req-1#1":{"deployment":"a:m1","decided_at":1700000120.1,"deadline":1700000240'
    '.1},"req-2#2":{"deployment":"a:m1","decided_at":1700000121.1,"deadline":1700000241.1}},"'
    'accepted_through":{"llm.requests:0":120,"llm.requests:3":7},"expiry_check_at":1700000250'
    '.1,"rate":{"tenants":{"acme":{"index":28333335,"count":4}}},"parked":{"req-3#2":{"reques'
    't_id":"req-3","attempt":2,"carrier":4200,"deadline":1700000300.0,"tried":["b:m1"],"retry'
    '_at":1700000125.5,"waits":2}},"line":{"waiting":3,"after":4100,"blocked_at":4240},"pacer'
    's":{"route":{"multiplier":1.25,"spent":0.5,"requests":40},"tenant:acme":{"multiplier":0.'
    '0,"spent":0.0,"requests":0}},"recent_grades":["g1","g2"]}'
)
#: ``RouteState().model_dump(mode="json")`` of the same code.
PYDANTIC_EMPTY_ROW = (
    '{"clock":0.0,"position":-1,"arms":{},"open_attempts":{},"accepted_through":{},'
    '"expiry_check_at":0.0,"rate":{"tenants":{}},"parked":{},'
    '"line":{"waiting":0,"after":-1,"blocked_at":-1},"pacers":{},"recent_grades":[]}'
)


def test_a_pydantic_row_loads_and_is_written_back_byte_for_byte() -> None:
    state = loads(PYDANTIC_ROW)
    assert state.clock == 1700000123.456789
    arm = state.arms["a:m1"]
    assert arm.breaker.state is BreakerPhase.HALF_OPEN
    assert arm.recent.slow.latency_s == 6.125
    assert arm.evidence["code"].square == 0.5625
    assert state.parking.parked["req-3#2"].tried == ["b:m1"]
    assert state.rate.tenants["acme"].count == 4
    assert state.budgets.pacers["tenant:acme"].multiplier == 0.0
    assert state.parking.line.blocked_at == 4240
    # Written back: the same keys, in the same order, with the same values.
    assert dumps(state) == orjson.dumps(json.loads(PYDANTIC_ROW))
    assert to_row(state) == json.loads(PYDANTIC_ROW)
    assert json.dumps(to_row(RouteState()), separators=(",", ":")) == PYDANTIC_EMPTY_ROW
    assert loads(PYDANTIC_EMPTY_ROW) == RouteState()


def test_floats_types_and_defaults_survive() -> None:
    state = loads(PYDANTIC_ROW)
    assert loads(dumps(state)) == state
    # JSON does not tell 1 from 1.0: float fields are floats again after a load.
    row = json.loads(PYDANTIC_ROW)
    row["arms"]["a:m1"]["alpha"] = 13
    row["clock"] = 5
    again = from_row(row)
    assert isinstance(again.arms["a:m1"].alpha, float)
    assert isinstance(again.clock, float)
    assert again == state.__class__(
        **{**{f: getattr(state, f) for f in state.__slots__}, "clock": 5.0}
    )
    # Keys missing from an older row take their defaults.
    assert from_row({"arms": {"x": {}}}).arms["x"] == ArmState()
    awkward = RouteState(clock=0.1 + 0.2, expiry_check_at=1e-300)
    assert loads(dumps(awkward)).clock == 0.1 + 0.2
    assert loads(dumps(awkward)).expiry_check_at == 1e-300
