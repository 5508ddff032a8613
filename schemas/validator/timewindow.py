"""The event ``time``: RFC 3339 within :data:`TIME_WINDOW` (UTC)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from esched.schemas.validator.errors import InvalidEvent, short_repr

__all__ = ["TIME_WINDOW", "check_time", "event_seconds"]

#: The event times accepted (``time``, as UTC): a time outside is a producer's bug
#: or an attack, and one near the ends of ``datetime``'s range cannot even be
#: converted to UTC. Wide enough for replayed historical traces.
TIME_WINDOW = (datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC))


_SAFE_YEARS = (TIME_WINDOW[0].year + 1, TIME_WINDOW[1].year - 2)
_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.\d+)?(?:([Zz])|([+-])(\d\d):?(\d\d))\Z"
)


def _utc(value: Any) -> datetime | None:
    """An RFC 3339 ``time`` (as the schema's format admits it: ``t``/``z`` in either
    case, a leap second, ``+hhmm``) in UTC, or None if it is not one or lies outside
    :data:`TIME_WINDOW`. The year is checked before any arithmetic, so nothing near
    the ends of ``datetime``'s range is ever converted."""
    m = _RFC3339.match(value) if isinstance(value, str) else None
    if m is None:
        return None
    year = int(m[1])
    low, high = TIME_WINDOW
    if not low.year - 1 <= year <= high.year:
        return None
    try:
        when = datetime(year, int(m[2]), int(m[3]), int(m[4]), int(m[5]), min(int(m[6]), 59))
    except ValueError:
        return None
    if m[7] is None:
        offset = timedelta(hours=int(m[9]), minutes=int(m[10]))
        when = when - offset if m[8] == "+" else when + offset
    when = when.replace(tzinfo=UTC)
    return when if low <= when < high else None


_FRACTION = re.compile(r"\.(\d+)")


def event_seconds(value: Any) -> float | None:
    """An event's RFC 3339 ``time`` as seconds since the epoch (UTC, with its
    fraction), or None if it is not one within :data:`TIME_WINDOW`: the log's clock
    for rules that age state by event time (the fold's reservations)."""
    if value.__class__ is str and len(value) >= 20 and value[10] == "T" and value[4] == "-":
        # The common spelling (upper-case T, no leap second): the C parser, 7x faster
        # than the regex; anything it refuses takes the full rule below.
        try:
            fast = datetime.fromisoformat(value)
        except ValueError:
            fast = None
        if fast is not None and fast.tzinfo is not None:
            return fast.timestamp() if TIME_WINDOW[0] <= fast < TIME_WINDOW[1] else None
    when = _utc(value)
    if when is None:
        return None
    frac = _FRACTION.match(value, 19)
    return when.timestamp() + (float("0." + frac[1]) if frac else 0.0)


def check_time(value: Any) -> None:
    """``time`` is RFC 3339 within :data:`TIME_WINDOW` (UTC)."""
    # The schema checked the format; a year a whole year inside the window stays
    # inside whatever its offset (at most a day): the common case, one slice.
    year = value[:4] if value.__class__ is str else ""
    if year.isdigit() and _SAFE_YEARS[0] <= int(year) <= _SAFE_YEARS[1] and value[4:5] == "-":
        return
    if _utc(value) is None:
        low, high = TIME_WINDOW
        raise InvalidEvent(
            "envelope",
            f"time: {short_repr(value)} is not an RFC 3339 timestamp within "
            f"{low.year}..{high.year - 1} (UTC)",
            "time",
        )
