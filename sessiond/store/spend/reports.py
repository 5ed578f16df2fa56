"""The reports: daily, monthly, per session and per 5-hour billing block.

Pure sums over counted responses (``charges.Ledger``), computed as ccusage's
``commands/mod.rs`` and ``blocks.rs`` compute them: days and months in the
user's time zone (or ``--timezone``), ``since``/``until`` inclusive on those
days, a session's row keyed by its project and session id (subagents in it),
sessions ordered by cost, blocks of 5 hours from the hour of their first
response, a gap block between two more than 5 hours apart, and the active
block's burn rate and projection to its end.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, tzinfo

import msgspec

from sessiond.wire.spend import Block, BurnRate, ModelSpend, Projection, Row, SpendReport

from .charges import Charge
from .prices import Prices

HOUR_MS = 3_600_000
MINUTE_MS = 60_000
BLOCK_HOURS = 5


def iso_ms(ms: int) -> str:
    """``2025-01-01T12:00:00.000Z`` (ccusage's ``format_rfc3339_millis``)."""
    dt = datetime.fromtimestamp(ms // 1000, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


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


def _add_model(per: dict[str, ModelSpend], name: str, m: ModelSpend) -> None:
    """Add one model's figures ``m`` into ``per[name]`` (a copy of ``m`` when
    ``per`` has none yet): how sums and totals merge their per-model breakdowns."""
    mine = per.get(name)
    if mine is None:
        per[name] = msgspec.structs.replace(m)
        return
    mine.input_tokens += m.input_tokens
    mine.output_tokens += m.output_tokens
    mine.cache_creation_tokens += m.cache_creation_tokens
    mine.cache_read_tokens += m.cache_read_tokens
    mine.total_tokens += m.total_tokens
    mine.cost += m.cost
    mine.unpriced = mine.unpriced or m.unpriced


class Sums:
    """A row being summed."""

    __slots__ = ("inp", "out", "cc", "cr", "cost", "n", "models", "unpriced", "per_model", "first", "last")

    def __init__(self) -> None:
        self.inp = self.out = self.cc = self.cr = self.n = 0
        self.cost = 0.0
        self.models: dict[str, None] = {}
        self.unpriced: dict[str, None] = {}
        self.per_model: dict[str, ModelSpend] = {}
        self.first: int | None = None
        self.last: int | None = None

    def add(self, c: Charge, cost: float, unpriced: bool) -> None:
        cc = c.cache_5m + c.cache_1h
        self.inp += c.input
        self.out += c.output
        self.cc += cc
        self.cr += c.cache_read
        self.cost += cost
        self.n += 1
        self.first = c.ts if self.first is None else min(self.first, c.ts)
        self.last = c.ts if self.last is None else max(self.last, c.ts)
        if unpriced and c.raw_model is not None:
            self.unpriced[c.raw_model] = None
        if c.model is not None:
            self.models[c.model] = None
            m = self.per_model.get(c.model)
            if m is None:
                m = self.per_model[c.model] = ModelSpend(c.model)
            m.input_tokens += c.input
            m.output_tokens += c.output
            m.cache_creation_tokens += cc
            m.cache_read_tokens += c.cache_read
            m.total_tokens += c.total
            m.cost += cost
            m.unpriced = m.unpriced or unpriced

    def merge(self, other: Sums) -> None:
        self.inp += other.inp
        self.out += other.out
        self.cc += other.cc
        self.cr += other.cr
        self.cost += other.cost
        self.n += other.n
        for ts in (other.first, other.last):
            if ts is not None:
                self.first = ts if self.first is None else min(self.first, ts)
                self.last = ts if self.last is None else max(self.last, ts)
        self.models.update(other.models)
        self.unpriced.update(other.unpriced)
        for name, m in other.per_model.items():
            _add_model(self.per_model, name, m)

    def row(self, key: str, by_model: bool, project: str | None = None, times: bool = False) -> Row:
        return Row(key, self.inp, self.out, self.cc, self.cr, self.inp + self.out + self.cc + self.cr, self.cost,
                   sorted(self.models), sorted(self.unpriced), self.n, project,
                   iso_ms(self.first) if times and self.first is not None else None,
                   iso_ms(self.last) if times and self.last is not None else None,
                   sorted(self.per_model.values(), key=lambda m: -m.cost) if by_model else None)


class Days:
    """The calendar day of a moment in one time zone (None: the local one), memoised per hour."""

    def __init__(self, tz: tzinfo | None) -> None:
        self.tz = tz
        self._memo: dict[int, str] = {}

    def __call__(self, ms: int) -> str:
        if self.tz is not None and getattr(self.tz, "utcoffset", None) and ms // HOUR_MS in self._memo:
            return self._memo[ms // HOUR_MS]
        if self.tz is None:
            day = datetime.fromtimestamp(ms / 1000).date().isoformat()
        else:
            day = datetime.fromtimestamp(ms / 1000, self.tz).date().isoformat()
            if len(self._memo) < 1 << 16:
                self._memo[ms // HOUR_MS] = day
        return day


def _in_range(day: str, since: date | None, until: date | None) -> bool:
    return (since is None or day >= since.isoformat()) and (until is None or day <= until.isoformat())


def periods(charges: Iterable[Charge], pricer: Pricer, tz: tzinfo | None, month: bool,
            since: date | None = None, until: date | None = None, by_model: bool = False) -> list[Row]:
    """The daily (or monthly) rows, oldest first."""
    day_of = Days(tz)
    groups: dict[str, Sums] = {}
    for c in charges:
        day = day_of(c.ts)
        if not _in_range(day, since, until):
            continue
        key = day[:7] if month else day
        s = groups.get(key)
        if s is None:
            s = groups[key] = Sums()
        s.add(c, *pricer.cost(c))
    return [groups[k].row(k, by_model) for k in sorted(groups)]


def sessions(charges: Iterable[Charge], pricer: Pricer, tz: tzinfo | None,
             since: date | None = None, until: date | None = None, by_model: bool = False) -> list[Row]:
    """One row per session (its subagents in it), the costliest first; a
    session is in ``since``..``until`` by the day of its last response."""
    day_of = Days(tz)
    groups: dict[tuple[str, str], Sums] = {}
    for c in charges:
        key = (c.project, c.session)
        s = groups.get(key)
        if s is None:
            s = groups[key] = Sums()
        s.add(c, *pricer.cost(c))
    rows = [s.row(session, by_model, project, times=True) for (project, session), s in groups.items()
            if s.inp + s.out + s.cc + s.cr > 0 and s.last is not None and _in_range(day_of(s.last), since, until)]
    rows.sort(key=lambda r: -r.cost)
    return rows


def totals(rows: Iterable[Row], by_model: bool = False) -> Row:
    """The sum of rows (a report's last line)."""
    t = Row("total")
    per: dict[str, ModelSpend] = {}
    models: dict[str, None] = {}
    unpriced: dict[str, None] = {}
    for r in rows:
        t.input_tokens += r.input_tokens
        t.output_tokens += r.output_tokens
        t.cache_creation_tokens += r.cache_creation_tokens
        t.cache_read_tokens += r.cache_read_tokens
        t.total_tokens += r.total_tokens
        t.cost += r.cost
        t.responses += r.responses
        models.update(dict.fromkeys(r.models))
        unpriced.update(dict.fromkeys(r.unpriced))
        for m in r.breakdown or ():
            _add_model(per, m.model, m)
    t.models = sorted(models)
    t.unpriced = sorted(unpriced)
    if by_model:
        t.breakdown = sorted(per.values(), key=lambda m: -m.cost)
    return t


def _block(start: int, members: list[tuple[Charge, float, bool]], now: int) -> Block:
    end = start + BLOCK_HOURS * HOUR_MS
    last = members[-1][0].ts
    s = Sums()
    for c, cost, unpriced in members:
        s.add(c, cost, unpriced)
    models: dict[str, None] = {}
    for c, _, _ in members:
        if c.model is not None:
            models[c.model] = None
    active = now - last < BLOCK_HOURS * HOUR_MS and now < end
    total = s.inp + s.out + s.cc + s.cr
    b = Block(iso_ms(start), iso_ms(start), iso_ms(end), iso_ms(last), active, False, len(members),
              s.inp, s.out, s.cc, s.cr, total, s.cost, list(models), sorted(s.unpriced))
    if active:
        minutes = (last - members[0][0].ts) / MINUTE_MS
        if minutes > 0:
            rate = BurnRate(total / minutes, (s.inp + s.out) / minutes, s.cost / minutes * 60)
            b.burn_rate = rate
            remaining = float(round((end - now) / MINUTE_MS))
            b.projection = Projection(round(total + rate.tokens_per_minute * remaining),
                                      round((s.cost + rate.cost_per_hour / 60 * remaining) * 100) / 100,
                                      int(remaining))
    return b


def blocks(charges: Iterable[Charge], pricer: Pricer, tz: tzinfo | None, now_ms: int,
           since: date | None = None, until: date | None = None) -> list[Block]:
    """The 5-hour billing blocks, oldest first, as ccusage's
    ``identify_session_blocks``: a block starts at the hour of its first
    response (UTC) and takes every response until one comes more than 5 hours
    after the block's start or after the previous response; a gap of more than
    5 hours between two responses is a gap block. ``since``/``until`` select
    blocks by the day they start."""
    duration = BLOCK_HOURS * HOUR_MS
    ordered = sorted(charges, key=lambda c: c.ts)
    out: list[Block] = []
    start: int | None = None
    members: list[tuple[Charge, float, bool]] = []
    for c in ordered:
        if start is not None:
            last = members[-1][0].ts if members else start
            if c.ts - start > duration or c.ts - last > duration:
                out.append(_block(start, members, now_ms))
                members = []
                if c.ts - last > duration:
                    gap_start = last + duration
                    out.append(Block(f"gap-{iso_ms(gap_start)}", iso_ms(gap_start), iso_ms(c.ts), is_gap=True))
                start = c.ts - c.ts % HOUR_MS
        else:
            start = c.ts - c.ts % HOUR_MS
        members.append((c, *pricer.cost(c)))
    if start is not None and members:
        out.append(_block(start, members, now_ms))
    if since is not None or until is not None:
        day_of = Days(tz)
        out = [b for b in out if _in_range(day_of(_parse_iso(b.start_time)), since, until)]
    return out


def _parse_iso(value: str) -> int:
    dt = datetime.fromisoformat(value)
    return int(dt.timestamp() * 1000)


def report(kind: str, charges: list[Charge], pricer: Pricer, tz: tzinfo | None, tz_label: str, source: str,
           since: date | None = None, until: date | None = None, by_model: bool = False,
           now_ms: int | None = None) -> SpendReport:
    """A whole report of counted responses (for ``daily``, the ledger that took
    ``progress`` lines too), as the CLI prints it and the daemon answers it."""
    import time

    table = pricer.prices.table
    out = SpendReport(kind, source, tz_label, f"{table.source} ({table.date})", responses=len(charges))
    if kind == "blocks":
        out.blocks = blocks(charges, pricer, tz, int(time.time() * 1000) if now_ms is None else now_ms, since, until)
        out.unpriced = sorted({m for b in out.blocks for m in b.unpriced})
        return out
    if kind == "session":
        out.rows = sessions(charges, pricer, tz, since, until, by_model)
    else:
        out.rows = periods(charges, pricer, tz, kind == "monthly", since, until, by_model)
    out.totals = totals(out.rows, by_model)
    out.unpriced = out.totals.unpriced
    return out
