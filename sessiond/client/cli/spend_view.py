"""One session's tokens and cost as ``show`` and the picker print them: a line
for a person and the fields ``show --json`` adds.

The figures are ``store.spend.session.session_spend``'s (the rules and prices
of ``sessiond usage``); this module only words them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .output import printable_name


def compact(n: int) -> str:
    """A token count in at most four significant characters: ``950``,
    ``12.3k``, ``30k``, ``1.2M``."""
    if n < 1000:
        return str(n)
    value = float(n)
    for unit in ("k", "M", "B"):
        value /= 1000
        if round(value, 1) < 1000 or unit == "B":
            text = f"{value:.1f}" if value < 100 else f"{value:.0f}"
            return (text[:-2] if text.endswith(".0") else text) + unit
    return str(n)


def spend_of(path: Path) -> Any:
    """The session's figures (a ``wire.spend.Row``): its transcript and subagents, counted and priced."""
    from sessiond.store.spend.session import session_spend

    return session_spend(path)


def spend_line(row: Any) -> str:
    """``tokens 12.3k in · 4.5k out · 1.2M cache read · 30k cache write · $0.42``,
    then the models without a price when there are any (their cost not in it)."""
    if row.total_tokens == 0:
        return "tokens none recorded (no API response in the session's files) · $0.00"
    text = (f"tokens {compact(row.input_tokens)} in · {compact(row.output_tokens)} out · "
            f"{compact(row.cache_read_tokens)} cache read · {compact(row.cache_creation_tokens)} cache write · "
            f"${row.cost:,.2f}")
    if row.unpriced:
        text += f" (no price for {', '.join(map(printable_name, row.unpriced))}: not in the cost)"
    return text


def spend_fields(row: Any) -> dict[str, Any]:
    """The fields ``show --json`` adds: ``tokens`` (input, output,
    cacheCreation, cacheRead, total), ``costUSD`` and ``unpricedModels``."""
    return {"tokens": {"input": row.input_tokens, "output": row.output_tokens,
                       "cacheCreation": row.cache_creation_tokens, "cacheRead": row.cache_read_tokens,
                       "total": row.total_tokens},
            "costUSD": row.cost, "unpricedModels": list(row.unpriced)}
