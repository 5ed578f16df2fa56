"""The one way a length of time is written on a command line: ``45s``,
``30m``, ``12h``, ``7d``, ``2w``, ``3mo``, ``1y`` (a number, a decimal point
allowed, then its unit), for every option that takes one (``prune
--older-than``, ``trash empty --older-than``, the relative forms of
``search --since`` and ``usage --since/--until``).

Why its own module, in ``wire`` (it imports nothing of ours): the client's
commands and ``search`` (below the client) parse the same forms, and each had
its own table of units, one with weeks and decimals, one without, neither
with months or years. A bare number is refused, never guessed: ``30`` meant
seconds to a parser and days to the person typing it."""

from __future__ import annotations

import math
import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "mo": 30 * 86400, "y": 365 * 86400}
"""Seconds in each unit: a month is 30 days and a year 365, as an age to prune by means."""

FORMS = "45s, 30m, 2h, 7d, 2w, 3mo or 1y"
"""The forms, as every refusal names them."""

MAX_SECONDS = 1000 * 365 * 86400.0
"""A thousand years: past it a date before year 1 (``9999999y`` ago) overflows."""

_FORM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(mo|[smhdwy])")


def is_duration(text: str) -> bool:
    """Whether ``text`` is written as a duration (a number and a unit), right or
    out of range: what tells ``--since 7d`` from ``--since 2026-01-31``."""
    return _FORM.fullmatch(text.strip().lower()) is not None


def parse_duration(text: str) -> float:
    """``text`` (``7d``, ``1.5h``, ``3mo``) in seconds; ValueError saying what is
    wrong and naming the forms (a bare number: that it needs a unit)."""
    t = text.strip().lower()
    match = _FORM.fullmatch(t)
    if match is None:
        bare = t.replace(".", "", 1).isdigit()
        raise ValueError(f"not a duration: {text!r} ({'a number needs a unit: ' if bare else 'give e.g. '}{FORMS})")
    value = float(match.group(1)) * UNITS[match.group(2)]
    if not math.isfinite(value) or value > MAX_SECONDS:
        raise ValueError(f"a duration past a thousand years: {text!r}")
    return value
