"""Spend: tokens and cost from the daemon's spend book (``daemon/spend.py``),
computed in this connection's fair share of the read pool."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

from sessiond.wire import messages as m
from sessiond.wire.errors import bad_request
from sessiond.wire.spend import MAX_SPEND_ROWS

from ..workers import BACKGROUND
from .lifecycle import _answer
from .scope import requested_projects

if TYPE_CHECKING:
    from ..connection import Connection


def _day(value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise bad_request(f"not a day: {value!r} (YYYY-MM-DD)") from None


def _zone(name: str | None):
    if name is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise bad_request(f"no such time zone: {name!r}") from None


def handle_spend(conn: Connection, req: m.Spend) -> None:
    daemon = conn.daemon
    since, until, tz = _day(req.since), _day(req.until), _zone(req.timezone)
    book = daemon.spend

    scope: list[set[str] | None] = []

    def work():
        names = requested_projects(daemon.settings.root, req.dirs, req.all)
        scope.append(None if names is None else set(names))
        out = book.answer(req.report, scope[0], since, until, tz, req.timezone or "local", req.byModel)
        if len(out.rows) > MAX_SPEND_ROWS or len(out.blocks) > MAX_SPEND_ROWS:
            from sessiond.wire.errors import too_large

            raise too_large(f"the report has more than {MAX_SPEND_ROWS:,} rows: narrow it (--since, --cwd)")
        return out

    fut = daemon.fair.submit(work, owner=conn.id, answer=True)
    done = _answer(conn, req.id, lambda out: m.Spent(id=req.id, spend=out))

    def answer(f) -> None:
        if not f.cancelled():
            done(f.result() if f.exception() is None else None, f.exception())
        if scope and book.stale(scope[0]):  # what no observer reported, for the next answer
            daemon.fair.submit(book.revalidate, scope[0], owner=BACKGROUND)

    fut.add_done_callback(answer)
