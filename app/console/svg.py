"""Inline SVG plots, drawn on the server: share over time, breaker timeline, factor bars.

No script and no style attribute (the content security policy forbids inline styles):
colours are SVG presentation attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from app.console.html import esc, when

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
STATE_COLOURS = {"closed": "#59a14f", "half_open": "#edc948", "open": "#e15759", None: "#e6e6e6"}


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def legend(names: Sequence[str]) -> str:
    items = "".join(
        f'<span class=key><svg width="12" height="12" aria-hidden="true">'
        f'<rect width="12" height="12" fill="{colour(i)}"/></svg> {esc(name)}</span>'
        for i, name in enumerate(names)
    )
    return f"<div class=legend>{items}</div>"


def share_chart(
    buckets: Sequence[datetime],
    counts: Mapping[str, Sequence[int]],
    *,
    width: int = 760,
    height: int = 220,
) -> str:
    """Stacked areas: each deployment's share of the attempts, per time bucket."""
    names = sorted(counts)
    if not buckets or not names:
        return "<p class=empty>No attempts in this window.</p>"
    left, top, plot_w, plot_h = 40, 10, width - 50, height - 40
    totals = [sum(counts[n][i] for n in names) for i in range(len(buckets))]
    step = plot_w / max(len(buckets) - 1, 1)
    shown = [i for i, total in enumerate(totals) if total]  # no attempt: no share to draw
    base = [0.0] * len(buckets)
    shapes = []
    for index, name in enumerate(names):
        upper = [
            base[i] + (counts[name][i] / totals[i] if totals[i] else 0.0)
            for i in range(len(buckets))
        ]
        points = [(left + i * step, top + plot_h * (1 - upper[i])) for i in shown]
        points += [(left + i * step, top + plot_h * (1 - base[i])) for i in reversed(shown)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        shapes.append(
            f'<polygon points="{path}" fill="{colour(index)}" fill-opacity="0.85">'
            f"<title>{esc(name)}</title></polygon>"
        )
        base = upper
    axis = _time_axis(buckets, left, top + plot_h, step) + _percent_axis(left, top, plot_h)
    return (
        f'<svg class=chart width="{width}" height="{height}" role="img" '
        f'aria-label="share of attempts per deployment over time">'
        f"<title>Share of attempts per deployment</title>{''.join(shapes)}{axis}</svg>"
        + legend(names)
    )


def breaker_timeline(
    buckets: Sequence[datetime],
    lanes: Mapping[str, Sequence[str | None]],
    *,
    width: int = 760,
    lane_h: int = 18,
) -> str:
    """One lane per deployment: the worst breaker state each time bucket saw."""
    names = sorted(lanes)
    if not buckets or not names:
        return "<p class=empty>No decisions in this window.</p>"
    label_w, gap = 200, 4
    plot_w = width - label_w - 10
    cell = plot_w / len(buckets)
    height = len(names) * (lane_h + gap) + 24
    parts = []
    for row, name in enumerate(names):
        y = row * (lane_h + gap)
        parts.append(
            f'<text x="{label_w - 6}" y="{y + lane_h - 5}" text-anchor="end" '
            f'font-size="11">{esc(name)}</text>'
        )
        for i, state in enumerate(lanes[name]):
            parts.append(
                f'<rect x="{label_w + i * cell:.1f}" y="{y}" width="{cell + 0.5:.1f}" '
                f'height="{lane_h}" fill="{STATE_COLOURS.get(state, "#999")}">'
                f"<title>{esc(name)} {esc(when(buckets[i]))}: {esc(state or 'no decision')}"
                "</title></rect>"
            )
    axis_y = len(names) * (lane_h + gap) + 14
    parts.append(
        f'<text x="{label_w}" y="{axis_y}" font-size="10">{esc(when(buckets[0]))}</text>'
        f'<text x="{width - 10}" y="{axis_y}" font-size="10" text-anchor="end">'
        f"{esc(when(buckets[-1]))}</text>"
    )
    keys = "".join(
        f'<span class=key><svg width="12" height="12" aria-hidden="true"><rect width="12" '
        f'height="12" fill="{STATE_COLOURS[s]}"/></svg> {esc(s or "no decision")}</span>'
        for s in ("closed", "half_open", "open", None)
    )
    return (
        f'<svg class=chart width="{width}" height="{height}" role="img" '
        f'aria-label="breaker state per deployment over time"><title>Breaker timeline</title>'
        f"{''.join(parts)}</svg><div class=legend>{keys}</div>"
    )


def factor_bar(
    value: float, scale: float, index: int, *, signed: bool = False, width: int = 90
) -> str:
    """A bar for one factor's contribution: from the left edge, or (``signed``: some
    contribution of the decision is negative) from a centre line, negative to the left."""
    half = width / 2 if signed else 0.0
    length = 0.0 if scale <= 0 else min(abs(value) / scale, 1.0) * (width - half)
    x = half - length if value < 0 else half
    return (
        f'<svg class=bar width="{width}" height="12" role="img" aria-label="{value:+.4g}">'
        f'<rect x="0" y="5" width="{width}" height="2" fill="#eee"/>'
        f'<rect x="{x:.1f}" y="1" width="{max(length, 0.5):.1f}" height="10" '
        f'fill="{colour(index)}"/><line x1="{half}" x2="{half}" y1="0" y2="12" '
        'stroke="#888" stroke-width="1"/></svg>'
    )


def _time_axis(buckets: Sequence[datetime], left: float, y: float, step: float) -> str:
    marks = sorted({0, len(buckets) // 2, len(buckets) - 1})
    return "".join(
        f'<text x="{left + i * step:.1f}" y="{y + 16:.1f}" font-size="10" '
        f'text-anchor="{"start" if i == 0 else "end" if i == len(buckets) - 1 else "middle"}">'
        f"{esc(when(buckets[i])[:19])}</text>"
        for i in marks
    )


def _percent_axis(left: float, top: float, plot_h: float) -> str:
    return "".join(
        f'<text x="{left - 4}" y="{top + plot_h * (1 - p / 100) + 3:.1f}" font-size="10" '
        f'text-anchor="end">{p}%</text>'
        for p in (0, 50, 100)
    )
