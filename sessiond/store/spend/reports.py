"""The reports: daily, monthly, per session and per 5-hour billing block.

Sums over counted responses (``charges.Ledger``), computed as ccusage's
``commands/mod.rs`` and ``blocks.rs`` compute them: days and months in the
user's time zone (or ``--timezone``), ``since``/``until`` inclusive on those
days, a session's row keyed by its project and session id (subagents in it),
sessions ordered by cost, blocks of 5 hours from the hour of their first
response, a gap block between two more than 5 hours apart, and the active
block's burn rate and projection to its end.

Every report is made from the responses' sums per session, model and quarter
hour (``cells``): the files' responses are summed so first (``tally``), and
the daemon keeps the same sums as lines arrive, so both make a report by the
same code from the same sums, and agree to the bit.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import date, datetime, tzinfo
from typing import Any

from sessiond.wire.spend import Block, BurnRate, ModelSpend, Projection, Row, SpendReport

from .cells import HOUR_MS, Cell, Cells, SessionKey, Tally, dollars, quarter_start, units
from .charges import Charge
from .prices import Prices

MINUTE_MS = 60_000
BLOCK_HOURS = 5


def iso_ms(ms: int) -> str:
    """``2025-01-01T12:00:00.000Z`` (ccusage's ``format_rfc3339_millis``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


class Pricer:
    """Costs responses with a price table the way ccusage's ``auto`` mode does:
    an entry's own ``costUSD`` when it has one, else its tokens priced; a
    model without a price costs 0 and is remembered as unpriced."""

    def __init__(self, prices: Prices) -> None:
        self.prices = prices

    def cost(self, c: Charge) -> tuple[float, bool]:
        """(cost, unpriced) of one response."""
        if c.cost_usd is not None:
            return c.cost_usd, False
        if c.raw_model is None:
            return 0.0, False
        rate = self.prices.find(c.raw_model)
        if rate is None:
            return 0.0, c.total > 0
        return self.prices.cost(rate, c.input, c.output, c.cache_5m, c.cache_1h, c.cache_read, c.fast), False

    def units(self, c: Charge) -> tuple[int, bool]:
        """(cost in ``cells.units``, unpriced) of one response."""
        cost, unpriced = self.cost(c)
        return units(cost), unpriced


def tally(charges: Iterable[Charge], pricer: Pricer, timed: bool = True) -> Tally:
    """The sums of counted responses (one scope), as the daemon keeps them."""
    t = Tally(timed)
    for c in charges:
        t.count("", c, *pricer.units(c))
    return t


class Sums:
    """A row being summed, cell by cell (or response by response: ``add``)."""

    __slots__ = ("inp", "out", "cc", "cr", "cost", "n", "models", "unpriced", "per_model", "first", "last")

    def __init__(self) -> None:
        self.inp = self.out = self.cc = self.cr = self.n = self.cost = 0
        self.models: dict[str, None] = {}
        self.unpriced: dict[str, None] = {}
        self.per_model: dict[str, list[Any]] = {}
        """model -> [input, output, cache creation, cache read, cost units, unpriced]"""
        self.first: int | None = None
        self.last: int | None = None

    def add_counts(self, part: Cell | Sums) -> None:
        """Add ``part``'s tokens, cost, count and unpriced models (not its models or times)."""
        self.inp += part.inp
        self.out += part.out
        self.cc += part.cc
        self.cr += part.cr
        self.cost += part.cost
        self.n += part.n
        if part.unpriced:
            self.unpriced.update(dict.fromkeys(part.unpriced))

    def add_cell(self, model: str | None, cell: Cell, times: bool = False) -> None:
        self.add_counts(cell)
        if times:
            lo, hi = cell.bounds()
            self.first = lo if self.first is None or lo < self.first else self.first
            self.last = hi if self.last is None or hi > self.last else self.last
        if model is not None:
            self.models[model] = None
            m = self.per_model.get(model)
            if m is None:
                m = self.per_model[model] = [0, 0, 0, 0, 0, False]
            m[0] += cell.inp
            m[1] += cell.out
            m[2] += cell.cc
            m[3] += cell.cr
            m[4] += cell.cost
            m[5] = m[5] or bool(cell.unpriced)

    def add(self, c: Charge, cost: float, unpriced: bool) -> None:
        """Add one response and its cost."""
        cell = Cell(timed=True)
        cell.count(c, units(cost), unpriced, 1)
        self.add_cell(c.model, cell, times=True)

    def breakdown(self) -> list[ModelSpend]:
        """Per model, the costliest first (then by name)."""
        out = [ModelSpend(name, m[0], m[1], m[2], m[3], m[0] + m[1] + m[2] + m[3], dollars(m[4]), m[5])
               for name, m in self.per_model.items()]
        return sorted(out, key=lambda m: (-m.cost, m.model))

    def row(self, key: str, by_model: bool, project: str | None = None, times: bool = False) -> Row:
        return Row(key, self.inp, self.out, self.cc, self.cr, self.inp + self.out + self.cc + self.cr,
                   dollars(self.cost), sorted(self.models), sorted(self.unpriced), self.n, project,
                   iso_ms(self.first) if times and self.first is not None else None,
                   iso_ms(self.last) if times and self.last is not None else None,
                   self.breakdown() if by_model else None)


class Days:
    """The calendar day of a moment in one time zone (None: the local one),
    memoised per quarter hour (all of which falls on one day: ``cells``)."""

    def __init__(self, tz: tzinfo | None) -> None:
        self.tz = tz
        self._memo: dict[int, str] = {}

    def __call__(self, ms: int) -> str:
        q = ms // 900_000
        day = self._memo.get(q)
        if day is None:
            if self.tz is None:
                day = datetime.fromtimestamp(ms / 1000).date().isoformat()
            else:
                day = datetime.fromtimestamp(ms / 1000, self.tz).date().isoformat()
            if len(self._memo) < 1 << 18:
                self._memo[q] = day
        return day


def _in_range(day: str, since: date | None, until: date | None) -> bool:
    return (since is None or day >= since.isoformat()) and (until is None or day <= until.isoformat())


Sessions = Iterable[tuple[SessionKey, Cells]]


def periods_of(sessions: Sessions, tz: tzinfo | None, month: bool, since: date | None = None,
               until: date | None = None, by_model: bool = False) -> list[Row]:
    """The daily (or monthly) rows of the sessions' sums, oldest first."""
    day_of = Days(tz)
    groups: dict[str, Sums] = {}
    for _, cells in sessions:
        for (model, slot), cell in cells.items():
            day = day_of(quarter_start(slot))
            if (since is not None or until is not None) and not _in_range(day, since, until):
                continue
            key = day[:7] if month else day
            s = groups.get(key)
            if s is None:
                s = groups[key] = Sums()
            s.add_cell(model, cell)
    return [groups[k].row(k, by_model) for k in sorted(groups)]


SessionMemo = dict[tuple[str, str, bool], tuple[Cells, int, int, int, Row]]
"""A session's row as last made: (its cells, their change, cost units, last
response, row), by (project, session, by_model)."""


def sessions_of(sessions: Sessions, tz: tzinfo | None, since: date | None = None, until: date | None = None,
                by_model: bool = False, memo: SessionMemo | None = None) -> list[Row]:
    """One row per session (its subagents in it), the costliest first; a
    session is in ``since``..``until`` by the day of its last response.
    ``memo``: the rows made last time, reused for sessions whose cells did not
    change since (and left holding this answer's rows only)."""
    day_of = Days(tz)
    found: list[tuple[int, Row]] = []
    made: SessionMemo = {}
    for (project, session), cells in sessions:
        key = (project, session, by_model)
        kept = memo.get(key) if memo is not None else None
        if kept is not None and kept[0] is cells and kept[1] == cells.changed:
            cost, last, row = kept[2], kept[3], kept[4]
        else:
            s = Sums()
            for (model, _), cell in cells.items():
                s.add_cell(model, cell, times=True)
            if s.inp + s.out + s.cc + s.cr <= 0 or s.last is None:
                continue
            cost, last, row = s.cost, s.last, s.row(session, by_model, project, times=True)
        if memo is not None:
            made[key] = (cells, cells.changed, cost, last, row)
        if (since is None and until is None) or _in_range(day_of(last), since, until):
            found.append((cost, row))
    if memo is not None:
        memo.clear()
        memo.update(made)
    found.sort(key=lambda f: (-f[0], f[1].last_activity or "", f[1].project or "", f[1].key))
    return [row for _, row in found]


def periods(charges: Iterable[Charge], pricer: Pricer, tz: tzinfo | None, month: bool,
            since: date | None = None, until: date | None = None, by_model: bool = False) -> list[Row]:
    """The daily (or monthly) rows of counted responses, oldest first."""
    return periods_of(tally(charges, pricer, timed=False).sessions(), tz, month, since, until, by_model)


def sessions(charges: Iterable[Charge], pricer: Pricer, tz: tzinfo | None,
             since: date | None = None, until: date | None = None, by_model: bool = False) -> list[Row]:
    """One row per session of counted responses (``sessions_of``)."""
    return sessions_of(tally(charges, pricer).sessions(), tz, since, until, by_model)


def totals(rows: Iterable[Row], by_model: bool = False) -> Row:
    """The sum of rows (a report's last line); costs summed exactly."""
    t = Row("total")
    cost = 0
    per: dict[str, list[Any]] = {}
    models: dict[str, None] = {}
    unpriced: dict[str, None] = {}
    for r in rows:
        t.input_tokens += r.input_tokens
        t.output_tokens += r.output_tokens
        t.cache_creation_tokens += r.cache_creation_tokens
        t.cache_read_tokens += r.cache_read_tokens
        t.total_tokens += r.total_tokens
        cost += units(r.cost)
        t.responses += r.responses
        models.update(dict.fromkeys(r.models))
        unpriced.update(dict.fromkeys(r.unpriced))
        for m in r.breakdown or ():
            mine = per.get(m.model)
            if mine is None:
                mine = per[m.model] = [0, 0, 0, 0, 0, False]
            mine[0] += m.input_tokens
            mine[1] += m.output_tokens
            mine[2] += m.cache_creation_tokens
            mine[3] += m.cache_read_tokens
            mine[4] += units(m.cost)
            mine[5] = mine[5] or m.unpriced
    t.cost = dollars(cost)
    t.models = sorted(models)
    t.unpriced = sorted(unpriced)
    if by_model:
        s = Sums()
        s.per_model = per
        t.breakdown = s.breakdown()
    return t


class _Slot:
    """The sums of every session's cells of one slot (a block takes whole slots)."""

    __slots__ = ("sums", "model_first")

    def __init__(self) -> None:
        self.sums = Sums()
        self.model_first: dict[str, int] = {}


def _block(start: int, slots: list[_Slot], now: int) -> Block:
    end = start + BLOCK_HOURS * HOUR_MS
    s = Sums()
    first_of: dict[str, int] = {}
    for slot in slots:
        s.add_counts(slot.sums)
        for model, ts in slot.model_first.items():
            if model not in first_of or ts < first_of[model]:
                first_of[model] = ts
    first, last = slots[0].sums.first, slots[-1].sums.last
    assert first is not None and last is not None
    models = sorted(first_of, key=lambda m: (first_of[m], m))  # in the order they first answered
    active = now - last < BLOCK_HOURS * HOUR_MS and now < end
    total = s.inp + s.out + s.cc + s.cr
    cost = dollars(s.cost)
    b = Block(iso_ms(start), iso_ms(start), iso_ms(end), iso_ms(last), active, False, s.n,
              s.inp, s.out, s.cc, s.cr, total, cost, models, sorted(s.unpriced))
    if active:
        minutes = (last - first) / MINUTE_MS
        if minutes > 0:
            rate = BurnRate(total / minutes, (s.inp + s.out) / minutes, cost / minutes * 60)
            b.burn_rate = rate
            remaining = float(round((end - now) / MINUTE_MS))
            b.projection = Projection(round(total + rate.tokens_per_minute * remaining),
                                      round((cost + rate.cost_per_hour / 60 * remaining) * 100) / 100,
                                      int(remaining))
    return b


def blocks_of(sessions: Sessions, tz: tzinfo | None, now_ms: int, since: date | None = None,
              until: date | None = None) -> list[Block]:
    """The 5-hour billing blocks of the sessions' sums, oldest first, as
    ccusage's ``identify_session_blocks``: a block starts at the hour of its
    first response (UTC) and takes every response until one comes more than 5
    hours after the block's start or after the previous response; a gap of more
    than 5 hours between two responses is a gap block. ``since``/``until``
    select blocks by the day they start. The slots are taken whole (``cells``)."""
    by_slot: dict[int, _Slot] = {}
    for _, cells in sessions:
        for (model, slot), cell in cells.items():
            b = by_slot.get(slot)
            if b is None:
                b = by_slot[slot] = _Slot()
            b.sums.add_cell(model, cell, times=True)
            if model is not None:
                first = cell.bounds()[0]
                if model not in b.model_first or first < b.model_first[model]:
                    b.model_first[model] = first
    duration = BLOCK_HOURS * HOUR_MS
    out: list[Block] = []
    start: int | None = None
    members: list[_Slot] = []
    for key in sorted(by_slot):
        b = by_slot[key]
        lo, hi = b.sums.first, b.sums.last
        assert lo is not None and hi is not None
        if start is not None:
            last = members[-1].sums.last if members else start
            assert last is not None
            if lo - start > duration or lo - last > duration:
                out.append(_block(start, members, now_ms))
                members = []
                if lo - last > duration:
                    gap_start = last + duration
                    out.append(Block(f"gap-{iso_ms(gap_start)}", iso_ms(gap_start), iso_ms(lo), is_gap=True))
                start = lo - lo % HOUR_MS
        else:
            start = lo - lo % HOUR_MS
        members.append(b)
    if start is not None and members:
        out.append(_block(start, members, now_ms))
    if since is not None or until is not None:
        day_of = Days(tz)
        out = [b for b in out if _in_range(day_of(_parse_iso(b.start_time)), since, until)]
    return out


def blocks(charges: Iterable[Charge], pricer: Pricer, tz: tzinfo | None, now_ms: int,
           since: date | None = None, until: date | None = None) -> list[Block]:
    """The 5-hour billing blocks of counted responses (``blocks_of``)."""
    return blocks_of(tally(charges, pricer).sessions(), tz, now_ms, since, until)


def _parse_iso(value: str) -> int:
    dt = datetime.fromisoformat(value)
    return int(dt.timestamp() * 1000)


def report_of(kind: str, sessions: Sessions, responses: int, prices: Prices, tz: tzinfo | None, tz_label: str,
              source: str, since: date | None = None, until: date | None = None, by_model: bool = False,
              now_ms: int | None = None, memo: SessionMemo | None = None) -> SpendReport:
    """A whole report of the sessions' sums (for ``daily``, those of the ledger
    that took ``progress`` lines too), as the CLI prints it and the daemon
    answers it (``memo``: its session rows kept between answers, ``sessions_of``)."""
    table = prices.table
    out = SpendReport(kind, source, tz_label, f"{table.source} ({table.date})", responses=responses)
    if kind == "blocks":
        out.blocks = blocks_of(sessions, tz, int(time.time() * 1000) if now_ms is None else now_ms, since, until)
        out.unpriced = sorted({m for b in out.blocks for m in b.unpriced})
        return out
    if kind == "session":
        out.rows = sessions_of(sessions, tz, since, until, by_model, memo)
    else:
        out.rows = periods_of(sessions, tz, kind == "monthly", since, until, by_model)
    out.totals = totals(out.rows, by_model)
    out.unpriced = out.totals.unpriced
    return out


def report(kind: str, charges: list[Charge], pricer: Pricer, tz: tzinfo | None, tz_label: str, source: str,
           since: date | None = None, until: date | None = None, by_model: bool = False,
           now_ms: int | None = None) -> SpendReport:
    """A whole report of counted responses (``report_of`` over their sums)."""
    t = tally(charges, pricer, timed=kind != "daily" and kind != "monthly")
    return report_of(kind, t.sessions(), len(charges), pricer.prices, tz, tz_label, source, since, until,
                     by_model, now_ms)
