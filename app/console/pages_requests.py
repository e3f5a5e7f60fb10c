"""The request log and the request page: where a request went, and why.

The request page shows each attempt's routing observability from the store's trace
(the document ``switchyard audit --json`` prints): the ranked candidates with a bar
per factor contribution, the exclusions and why, the selection rule and the context
the decision recorded, the outcome and its cost, and the final response's status.
Never a prompt or a completion: the prompt's hash and length only.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from app.analytics.store import Store
from app.analytics.trace import store_trace
from app.console import data
from app.console.html import (
    Html,
    badge,
    dl,
    esc,
    money,
    ms,
    num,
    page,
    request_url,
    select,
    table,
    url,
    when,
)
from app.console.svg import factor_bar


def log_page(store: Store, query: dict[str, str], footer: str) -> str:
    filters = data.LogFilters.of(query)
    try:
        number = int(query.get("page", "1"))
    except ValueError:
        number = 1
    result = data.request_log(store, filters, number)
    options = data.filter_options(store)
    form = (
        '<form class=filters method=get action="/requests" id=filters>'
        + "".join(
            select(name, options[name], getattr(filters, name), label=name)
            for name in ("status", "tenant", "route", "deployment")
        )
        + f"<label>since <input type=datetime-local step=1 name=since id=f-since "
        f'value="{esc(filters.since)}"></label>'
        f"<label>until <input type=datetime-local step=1 name=until id=f-until "
        f'value="{esc(filters.until)}"></label>'
        '<button type=submit id=apply>Filter</button> <a href="/requests">clear</a></form>'
    )
    rows = [
        [
            f'<a class=rid href="{esc(request_url(r["request_id"]))}">{esc(r["request_id"])}</a>',
            esc(when(r["accepted_at"])),
            esc(r["route"]),
            esc(r["tenant"] or ""),
            badge(r["status"]),
            esc(r["attempts"]) + (" " + badge("fallback") if (r["attempts"] or 0) > 1 else ""),
            esc(r["deployment"] or ""),
            esc(ms(r["duration_ms"])),
            esc(money(r["cost_usd"])),
        ]
        for r in result.rows
    ]
    listing = table(
        [
            "request",
            "accepted (UTC)",
            "route",
            "tenant",
            "status",
            "attempts",
            "answered by",
            "duration",
            "cost",
        ],
        rows,
        cls="log",
        empty="No request matches these filters.",
    )
    return page(
        "Requests",
        form + f'<p class=count id=count data-total="{result.total}">{result.total:,} '
        f"request(s)</p>" + listing + _pager(filters, result),
        active="/requests",
        footer=footer,
    )


def _pager(filters: data.LogFilters, result: data.LogPage) -> str:
    def link(number: int, text: str, rel: str) -> str:
        href = url("/requests", {**filters.params(), "page": number})
        return f'<a href="{esc(href)}" rel={rel} id=page-{rel}>{esc(text)}</a>'

    parts = [f"page {result.page} of {result.pages}"]
    if result.page > 1:
        parts.insert(0, link(result.page - 1, "← newer", "prev"))
    if result.page < result.pages:
        parts.append(link(result.page + 1, "older →", "next"))
    return "<nav class=pager>" + " ".join(parts) + "</nav>"


def request_page(store: Store, request_id: str, footer: str) -> str | None:
    trace = store_trace(store, request_id)
    if trace is None:
        return None
    summary = data.request_summary(store, request_id) or {}
    accepted = trace["accepted"] or {}
    response = trace["response"]
    prompt = None
    if accepted:
        prompt = (
            f"sha256 {accepted['prompt_sha256'][:16]}…, {accepted['prompt_chars']} chars "
            "(the text is never stored)"
        )
    status = response["status"] if response else "pending"
    trace_link = f'<a href="/admin/trace/{esc(quote(request_id, safe=""))}">JSON</a>'
    head = dl(
        [
            ("route", accepted.get("route")),
            ("tenant", summary.get("tenant") or "(none)"),
            ("accepted", accepted.get("occurred_at")),
            ("prompt", prompt),
            ("final status", Html(badge(status))),
            ("attempts", len(trace["attempts"])),
            ("cost", money(summary.get("cost_usd"))),
            ("trace", Html(trace_link)),
        ]
    )
    attempts = "".join(_attempt(a) for a in trace["attempts"])
    return page(
        f"Request {request_id}",
        head + attempts + _response(response) + _grades(trace["grades"]),
        active="/requests",
        footer=footer,
    )


def _attempt(attempt: dict[str, Any]) -> str:
    decision, outcome = attempt["decision"], attempt["outcome"]
    parts = [
        f'<section class=attempt id="attempt-{attempt["attempt"]}">'
        f"<h2>Attempt {attempt['attempt']}</h2>"
    ]
    if decision is None:
        parts.append("<p>No decision recorded.</p>")
    else:
        parts.append(_decision(decision))
    parts.append("<h3>Outcome</h3>" + _outcome(outcome))
    return "".join(parts) + "</section>"


def _decision(decision: dict[str, Any]) -> str:
    context = {k: v for k, v in decision["context"].items() if v is not None}
    extra = _dynamic(context.pop("dynamic", None)) + _auto(context.pop("auto", None))
    head = dl(
        [
            ("chosen", decision["deployment"]),
            ("selection rule", context.pop("selection_rule", "score")),
            ("strategy", f"{decision['strategy']} ({decision['algorithm_version']})"),
            ("config", decision["config_hash"]),
            ("state version", decision["state_version"]),
            ("propensity", num(decision["propensity"])),
            ("decided", decision["occurred_at"]),
            *[(name.replace("_", " "), value) for name, value in context.items()],
        ]
    )
    body = _candidates(decision) + _exclusions(decision)
    return head + extra + "<h3>Candidates (ranked)</h3>" + body


def _dynamic(trace: dict[str, Any] | None) -> str:
    """A dynamic route's path: each node with the exit it left by."""
    if not trace:
        return ""
    path = trace.get("path") or {}
    steps = [f"{s['node']} ({s['exit']})" for s in path.get("steps", [])]
    walked = " → ".join([*steps, str(path.get("end", "?"))])
    return "<h3>Dynamic route</h3>" + dl(
        [
            ("graph", trace.get("graph")),
            ("path", walked),
            ("target", trace.get("target")),
            ("fallbacks left", ", ".join(trace.get("fallbacks") or []) or "none"),
            ("attempts before this model", trace.get("attempt_base") or None),
            ("forwarded from", trace.get("forwarded_from")),
        ]
    )


def _auto(trace: dict[str, Any] | None) -> str:
    """The auto router's classification and rules."""
    if not trace:
        return ""
    caps = (trace.get("max_input_usd_per_mtok"), trace.get("max_output_usd_per_mtok"))
    return "<h3>Auto router</h3>" + dl(
        [
            ("workload", f"{trace.get('workload')} (complexity {num(trace.get('complexity'))}, "
                         f"confidence {num(trace.get('confidence'))})"),
            ("objective", trace.get("objective")),
            ("spend profile", f"{trace.get('spend_profile')} (caps in/out $/Mtok: "
                              f"{caps[0] if caps[0] is not None else '-'} / "
                              f"{caps[1] if caps[1] is not None else '-'})"),
            ("capability floor", num(trace.get("capability_floor"))
             + (" (relaxed)" if trace.get("floor_relaxed") else "")),
            ("chosen", trace.get("chosen")),
            ("fallback order", ", ".join(trace.get("fallbacks") or []) or "none"),
            ("classifier", f"{trace.get('classifier')} ({trace.get('algorithm_version')})"),
        ]
    )  # fmt: skip


def _candidates(decision: dict[str, Any]) -> str:
    candidates = decision["candidates"]
    names = {name for c in candidates for name in c["factors"]}
    factors = sorted(names, key=lambda n: (FACTOR_ORDER.index(n) if n in FACTOR_ORDER else 99, n))
    values = [v for c in candidates for v in c["factors"].values()]
    scale = max((abs(v) for v in values), default=0.0)
    signed = any(v < 0 for v in values)
    rows = []
    for c in candidates:
        score = "never tried (picked before any score)" if c["never_tried"] else num(c["score"])
        cells = [
            esc(c["rank"]),
            esc(c["deployment"]) + (" " + badge("chosen") if c["chosen"] else ""),
            esc(score),
        ]
        for index, name in enumerate(factors):
            value = c["factors"].get(name)
            cells.append(
                ""
                if value is None
                else factor_bar(value, scale, _colour_of(name, index), signed=signed)
                + f" <span class=v>{value:+.4f}</span>"
            )
        rows.append(cells)
    return table(["#", "deployment", "score", *factors], rows, cls="candidates") + (
        "<p class=note>Bars: each factor's contribution to the score, to one scale per decision"
        + (" (left of the centre line: negative)" if signed else "")
        + ".</p>"
    )


#: Factors in this order (and colour) whatever the strategy lists first; others after.
FACTOR_ORDER = (
    "mean_reward", "exploration", "cost_bonus", "latency_bonus", "throughput_bonus",
    "alpha", "beta", "sample", "quality", "success_rate", "cost_usd", "latency_s",
    "latency_penalty", "failure_penalty",
)  # fmt: skip


def _colour_of(name: str, index: int) -> int:
    """A factor's colour index: the same for a factor on every decision."""
    return FACTOR_ORDER.index(name) if name in FACTOR_ORDER else len(FACTOR_ORDER) + index


def _exclusions(decision: dict[str, Any]) -> str:
    if not decision["excluded"]:
        return "<p class=note>No deployment excluded.</p>"
    rows = [
        [esc(e["deployment"]), f"<code>{esc(e['reason'])}</code>", esc(e["why"])]
        for e in decision["excluded"]
    ]
    return "<h3>Excluded</h3>" + table(["deployment", "reason", "why"], rows, cls="excluded")


def _outcome(outcome: dict[str, Any] | None) -> str:
    if outcome is None:
        return "<p>No outcome recorded (still in flight, or lost).</p>"
    return dl(
        [
            ("status", Html(badge(outcome["status_class"]))),
            ("deployment", outcome["deployment"]),
            ("HTTP", outcome["http_status"]),
            ("latency", ms(outcome["latency_ms"])),
            (
                "tokens in / out / cached",
                f"{outcome['tokens_in']} / {outcome['tokens_out']} / {outcome['tokens_cached']}",
            ),
            ("cost", money(outcome["cost_usd"])),
            ("reward", num(outcome["reward"])),
            ("finish reason", outcome["finish_reason"]),
            ("error", outcome["error"]),
            ("ended the request", "yes" if outcome["final"] else "no: retried"),
        ]
    )


def _response(response: dict[str, Any] | None) -> str:
    if response is None:
        return "<section><h2>Response</h2><p>None recorded yet.</p></section>"
    error = response["error"] or {}
    return (
        "<section id=response><h2>Response</h2>"
        + dl(
            [
                ("status", Html(badge(response["status"]))),
                ("attempts", response["attempts"]),
                ("deployment", response["deployment"]),
                ("error", f"{error['type']}: {error['message']}" if error else None),
                ("at", response["occurred_at"]),
            ]
        )
        + "<p class=note>The completion's text is not stored.</p></section>"
    )


def _grades(grades: list[dict[str, Any]]) -> str:
    if not grades:
        return ""
    rows = [
        [
            esc(g["source"]),
            esc(num(g["score"], 3)),
            esc(num(g["weight"], 2)),
            esc(g["deployment"]),
            esc(g["routing_offset"]),
        ]
        for g in grades
    ]
    return (
        "<section><h2>Grades</h2>"
        + table(["source", "score", "weight", "deployment", "routing offset"], rows)
        + "</section>"
    )
