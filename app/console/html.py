"""HTML building blocks of the console: escaping, the page frame, tables, formats.

Pages are rendered on the server, with no script: every value goes through
:func:`esc`, assets are the package's own (``/static/``), and the content security
policy (app/console/server.py) allows nothing from elsewhere, not even inline styles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

NAV = (("/requests", "Requests"), ("/providers", "Providers"), ("/policies", "Policies"))


def esc(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def url(path: str, params: Mapping[str, Any] | None = None) -> str:
    query = {k: v for k, v in (params or {}).items() if v not in (None, "")}
    return path + ("?" + urlencode(query) if query else "")


def request_url(request_id: str) -> str:
    return "/requests/" + quote(request_id, safe="")


def page(title: str, body: str, *, active: str = "", footer: str = "") -> str:
    links = "".join(
        f'<a href="{href}"{" class=active" if href == active else ""}>{esc(name)}</a>'
        for href, name in NAV
    )
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · Switchyard console</title>"
        '<link rel=icon href="/static/favicon.svg" type="image/svg+xml">'
        '<link rel=stylesheet href="/static/console.css"></head><body>'
        f"<header><span class=brand>Switchyard</span><nav>{links}</nav></header>"
        f"<main><h1>{esc(title)}</h1>{body}</main>"
        f"<footer>{footer}</footer></body></html>"
    )


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "", empty: str = ""
) -> str:
    """A table whose cells are already HTML (escape them with :func:`esc`)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    if not body and empty:
        body = f'<tr><td colspan="{len(headers)}" class=empty>{esc(empty)}</td></tr>'
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def badge(text: str, kind: str | None = None) -> str:
    return f'<span class="badge {esc(kind or text)}">{esc(text)}</span>'


def dl(pairs: Iterable[tuple[str, Any]]) -> str:
    items = "".join(
        f"<dt>{esc(k)}</dt><dd>{v if isinstance(v, Html) else esc(v)}</dd>"
        for k, v in pairs
        if v is not None
    )
    return f"<dl>{items}</dl>"


class Html(str):
    """A string that is already HTML (not escaped again by :func:`dl`)."""


def when(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def money(value: float | None) -> str:
    return "" if value is None else f"${value:.6f}"


def ms(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f} ms"


def pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f} %"


def num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return ""
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def select(name: str, options: Sequence[str], chosen: str, *, label: str) -> str:
    choices = ['<option value="">any</option>'] + [
        f'<option value="{esc(o)}"{" selected" if o == chosen else ""}>{esc(o)}</option>'
        for o in options
    ]
    return (
        f'<label>{esc(label)} <select name="{esc(name)}" id="f-{esc(name)}">'
        + "".join(choices)
        + "</select></label>"
    )
