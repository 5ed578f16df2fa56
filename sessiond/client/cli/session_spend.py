"""Tokens and cost of the sessions ``list`` prints, by ccusage's
rules as ``sessiond usage`` counts them (``sessiond.store.spend``), never a
second computation.

Why its own module: ``session_list`` is hot and click-free; these figures are
asked once per printed page. With a daemon serving the root: one ``Spend``
session report of the page's project dirs (not one request per session).
Without one: the page's own transcripts (and their subagents') are read and
run through the same ledger and pricer, up to ``READ_MAX`` bytes; a bigger page
gets no figures (null) and a line on stderr saying how to get them, so a
listing of thousands of sessions without a daemon never reads gigabytes.
Without a daemon each session is counted from its own files, as ``show``
counts it: a response a fork copied from its origin counts in both, where a
daemon's store-wide report (ccusage's dedup) counts it once.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from . import Context
from .output import echo

READ_MAX = 256 << 20
"""Bytes of transcripts a listing without a daemon reads for the figures."""


class SessionSpend(msgspec.Struct):
    """One listed session's figures: all tokens, USD, and the models the price
    table did not know (their tokens counted, their cost not)."""

    tokens: int = 0
    costUSD: float = 0.0
    unpriced: list[str] = []


def page_spend(obj: Context, sessions: list) -> dict[str, SessionSpend] | None:
    """Figures per session id of ``sessions`` (absent: no response counted),
    or None when they were not computed (too much to read without a daemon)."""
    if not sessions:
        return {}
    found = _from_daemon(obj, sessions)
    return found if found is not None else _from_files(obj, sessions)


def _key(s) -> tuple[str, str]:
    """(project dir name, session id): how a session report names a row."""
    return (Path(s.path).parent.name, s.sessionId)


def _pick(rows, sessions: list) -> dict[str, SessionSpend]:
    wanted = {_key(s) for s in sessions}
    return {r.key: SessionSpend(r.total_tokens, r.cost, list(r.unpriced))
            for r in rows if (r.project, r.key) in wanted}


def _from_daemon(obj: Context, sessions: list) -> dict[str, SessionSpend] | None:
    from sessiond.wire import messages as m
    from sessiond.wire.errors import DaemonUnavailable, RemoteError
    from sessiond.wire.messages import MAX_LIST_DIRS

    dirs = sorted({str(Path(s.path).parent) for s in sessions})
    every = len(dirs) > MAX_LIST_DIRS  # more projects than a request names: the report of all, picked from
    try:
        with obj.client(autostart=False, other_root_ok=True) as client:
            if not client.serves_own_root():
                return None
            spent = client.call(m.Spend(id=client.next_id(), report="session", dirs=[] if every else dirs, all=every)).spend
    except (DaemonUnavailable, RemoteError):
        return None
    return _pick(spent.rows, sessions)


def _from_files(obj: Context, sessions: list) -> dict[str, SessionSpend] | None:
    from sessiond.store.spend.prices import Prices
    from sessiond.store.spend.session import session_files, session_spend

    files = {s.sessionId: session_files(Path(s.path)) for s in sessions}
    total = 0
    for found in files.values():
        for p, _ in found:
            try:
                total += os.stat(p).st_size
            except OSError:
                continue
    if total > READ_MAX:
        echo(f"sessiond: tokens and cost not shown: the page's transcripts hold {total >> 20} MiB "
             "(start the daemon, or list fewer with --limit)", err=True)
        return None
    table = Prices.load()
    out: dict[str, SessionSpend] = {}
    for s in sessions:  # each session as ``show`` counts it (store/spend/session.py)
        row = session_spend(Path(s.path), table)
        if row.total_tokens:
            out[s.sessionId] = SessionSpend(row.total_tokens, row.cost, list(row.unpriced))
    return out
