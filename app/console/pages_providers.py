"""Provider health and policy versions."""

from __future__ import annotations

from app.analytics.store import Store
from app.console import data
from app.console.html import badge, esc, money, ms, page, pct, table, url, when
from app.console.svg import breaker_timeline, share_chart

WINDOWS = (("", "all"), ("1", "last hour"), ("6", "6 h"), ("24", "24 h"), ("168", "7 days"))


def providers_page(store: Store, query: dict[str, str], footer: str) -> str:
    chosen = query.get("hours", "")
    try:
        hours = float(chosen) if chosen else None
    except ValueError:
        hours = None
    window = data.span(store, hours)
    windows = " ".join(
        f'<a href="{esc(url("/providers", {"hours": h}))}"'
        f"{' class=active' if h == chosen else ''}>{esc(name)}</a>"
        for h, name in WINDOWS
    )
    body = f"<p class=windows>Window (to the latest event in the store): {windows}</p>"
    if window is None:
        return page(
            "Providers",
            body + "<p class=empty>The store holds no decision or outcome yet.</p>",
            active="/providers",
            footer=footer,
        )
    body += f"<p class=note>{esc(when(window[0]))} to {esc(when(window[1]))} UTC</p>"
    rows = [
        [
            esc(r["route"]),
            esc(r["deployment"]),
            badge(r["breaker"]) if r["breaker"] else "",
            esc(pct(r["success_rate"])),
            esc(f"{r['counted']:,} of {r['attempts']:,}"),
            esc(ms(r["latency_ema_ms"])),
            esc(ms(r["p50_ms"])) + " / " + esc(ms(r["p95_ms"])),
            esc(pct(r["share"])),
            esc(money(r["cost_usd"])),
            esc(r["top_failure"] or ""),
        ]
        for r in data.provider_health(store, window)
    ]
    body += table(
        [
            "route",
            "deployment",
            "breaker (last seen)",
            "success rate",
            "reliability sample",
            "latency EMA",
            "latency p50 / p95",
            "share",
            "cost",
            "most frequent failure",
        ],
        rows,
        cls="health",
        empty="No outcome in this window.",
    )
    body += (
        "<p class=note>Success rate over the outcomes that count for a provider (the reliability "
        "sample: <code>expired</code> and <code>client_error</code> are not the provider's "
        "doing). Latency EMA: the router's (20 % newest), recomputed from the window's last "
        "200 outcomes. Share: of the route's attempts.</p>"
    )
    buckets, counts = data.share_series(store, window)
    body += "<h2>Share of attempts per deployment</h2>" + share_chart(buckets, counts)
    buckets, lanes = data.breaker_series(store, window)
    body += (
        "<h2>Breaker timeline</h2>"
        "<p class=note>The worst state the route's decisions saw in each interval: "
        "open (excluded by the breaker), half-open (probing), closed (a candidate).</p>"
        + breaker_timeline(buckets, lanes)
    )
    return page("Providers", body, active="/providers", footer=footer)


def policies_page(store: Store, footer: str) -> str:
    versions = data.policy_versions(store)
    rows = [
        [
            esc(v["version"]),
            f"<code>{esc(v['hash'] or '')}</code>",
            esc(v["source"] or ""),
            esc(when(v["first_at"])),
            esc(", ".join(v["routes"])),
        ]
        for v in versions
    ]
    body = "<h2>Policy versions</h2>" + table(
        ["version", "hash", "source", "in force from", "routes"],
        rows,
        cls="policies",
        empty="No policy change recorded (policy.changed events appear on the routing log "
        "once policies are managed as events).",
    )
    hashes = [
        [
            f"<code>{esc(h['config_hash'])}</code>",
            esc(h["policy_version"]),
            esc(h["strategy"]),
            esc(f"{h['decisions']:,}"),
            esc(when(h["first_at"])),
            esc(when(h["last_at"])),
        ]
        for h in data.config_hashes(store)
    ]
    body += "<h2>What the decisions were made under</h2>" + table(
        ["config hash", "policy version", "strategy", "decisions", "first", "last"],
        hashes,
        cls="hashes",
        empty="No decision yet.",
    )
    return page("Policies", body, active="/policies", footer=footer)
