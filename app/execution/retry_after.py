"""Retry-After: how long a provider asked not to be called (``retry-after-ms`` or
``Retry-After``, in seconds or as an HTTP-date against the response's ``Date``)."""

from __future__ import annotations

import math
from email.utils import parsedate_to_datetime

import httpx


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP-date).

    An HTTP-date is measured against the response's own ``Date`` header, which
    needs no local clock and is immune to skew; without ``Date`` it gives None.
    """
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    return _date_delta(value, headers.get("date"))


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _date_delta(value: str, date: str | None) -> float | None:
    if date is None:
        return None
    try:
        until, now = parsedate_to_datetime(value), parsedate_to_datetime(date)
        delta = (until - now).total_seconds()
    except (TypeError, ValueError, IndexError):  # unparsable, or naive minus aware
        return None
    return max(0.0, delta)
