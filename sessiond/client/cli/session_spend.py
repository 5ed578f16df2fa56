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
Responses a fork copied from its origin are counted once store-wide by a
daemon (ccusage's dedup), but once per page file here when both are listed.
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


def _files(s) -> list[Path]:
    """A session's transcript and its subagents' (``<project>/<id>/**.jsonl``)."""
    path = Path(s.path)
    found = [path]
    below = path.parent / s.sessionId
    if below.is_dir() and not below.is_symlink():
        found += [p for p in below.rglob("*.jsonl") if p.is_file() and not p.is_symlink()]
    return found


def _from_files(obj: Context, sessions: list) -> dict[str, SessionSpend] | None:
    from sessiond.store.spend import charges, prices, reports

    files = sorted({p for s in sessions for p in _files(s)}, key=str)  # ccusage's order: by path
    total = 0
    for p in files:
        try:
            total += os.stat(p).st_size
        except OSError:
            continue
    if total > READ_MAX:
        echo(f"sessiond: tokens and cost not shown: the page's transcripts hold {total >> 20} MiB "
             "(start the daemon, or list fewer with --limit)", err=True)
        return None
    base = obj.store_root() / "projects"
    ledger = charges.Ledger()
    for p in files:
        try:
            ledger.extend(charges.charges_of_file(p, p.relative_to(base).parts))
        except (OSError, ValueError):
            continue
    rows = reports.sessions(ledger.charges, reports.Pricer(prices.Prices.load()), None)
    return _pick(rows, sessions)
