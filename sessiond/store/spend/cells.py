"""Counted responses summed per session, model and quarter hour: what every
report is made of, so a report is a lookup over these sums.

A ``Cell`` is the sum of the responses of one session and one model within one
quarter hour (UTC), kept apart for those at the very start of an hour. That is
fine enough for every report to stay exact:

- days and months: every time zone of the tz database has had offsets that are
  multiples of 15 minutes, changed at quarter-hour marks, since 1980, so all of
  a quarter hour falls on one day in any zone: the cells are put into days when
  a report asks, in the zone it asks for (a daemon serves users of any zone);
- sessions: a cell keeps its responses' times (a count per millisecond), so a
  session's first and last response stay exact as responses come and go;
- 5-hour blocks start on the hour and take what comes within 5 hours
  inclusive: a quarter hour lies wholly inside or outside a block but for a
  response at the very hour the block ends, which is in it; those responses
  are kept in a cell of their own, so a block is a run of whole cells.

Costs are summed exactly (fixed point, 2^-120 dollars: every cost a float can
hold down to 1e-21 dollars), so sums made in any order, added and taken away,
are the same to the bit. A ``Tally`` holds the cells of every session by the
scope they belong to (a project dir under ``projects/``); ``count`` adds or
takes away one response. Its memory is a cell per session, model and quarter
hour in use, and one time entry per distinct response time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .charges import Charge

QUARTER_MS = 900_000
HOUR_MS = 3_600_000
SCALE = 1 << 120
"""Cost units per dollar: sums of costs are integers, exact in any order."""


def units(cost: float) -> int:
    """A float cost as an integer count of 2^-120 dollars (exact for any cost
    of at least 2^-67 dollars; smaller parts are rounded down)."""
    num, den = cost.as_integer_ratio()
    return num * (SCALE // den) if den <= SCALE else (num * SCALE) // den


def dollars(amount: int) -> float:
    """Cost units as dollars, correctly rounded."""
    return amount / SCALE


def slot_of(ts: int) -> int:
    """The quarter hour of a time (ms since the epoch), doubled, plus one but
    for a time at the very start of an hour (which so sorts before the rest of
    its quarter): cells of the same slot are summed alike."""
    return (ts // QUARTER_MS) << 1 | (ts % HOUR_MS != 0)


def quarter_start(slot: int) -> int:
    """The first millisecond of a slot's quarter hour."""
    return (slot >> 1) * QUARTER_MS


class Cell:
    """The sums of one session's responses of one model in one slot: tokens,
    cost (units), how many, the raw model names priced at nothing (with their
    counts) and, when ``timed``, how many responses at each millisecond (for
    first and last times that stay exact when a response is taken away)."""

    __slots__ = ("inp", "out", "cc", "cr", "cost", "n", "unpriced", "times", "_lo", "_hi")

    def __init__(self, timed: bool) -> None:
        self.inp = self.out = self.cc = self.cr = self.cost = self.n = 0
        self.unpriced: dict[str, int] | None = None
        self.times: dict[int, int] | None = {} if timed else None
        self._lo: int | None = None
        self._hi: int | None = None

    def count(self, c: Charge, cost: int, unpriced: bool, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) one response and its cost."""
        self.inp += sign * c.input
        self.out += sign * c.output
        self.cc += sign * (c.cache_5m + c.cache_1h)
        self.cr += sign * c.cache_read
        self.cost += sign * cost
        self.n += sign
        if unpriced and c.raw_model is not None:
            if self.unpriced is None:
                self.unpriced = {}
            left = self.unpriced.get(c.raw_model, 0) + sign
            if left > 0:
                self.unpriced[c.raw_model] = left
            else:
                self.unpriced.pop(c.raw_model, None)
        times = self.times
        if times is not None:
            ts = c.ts
            left = times.get(ts, 0) + sign
            if left > 0:
                times[ts] = left
                if sign > 0:
                    self._lo = ts if self._lo is None or ts < self._lo else self._lo
                    self._hi = ts if self._hi is None or ts > self._hi else self._hi
            else:
                del times[ts]
                if ts == self._lo or ts == self._hi:
                    self._lo = self._hi = None  # found again when asked

    def bounds(self) -> tuple[int, int]:
        """The first and last response time (a timed cell with responses)."""
        if self._lo is None or self._hi is None:
            assert self.times
            self._lo, self._hi = min(self.times), max(self.times)
        return self._lo, self._hi

    @property
    def total(self) -> int:
        return self.inp + self.out + self.cc + self.cr


class Cells(dict[tuple[str | None, int], Cell]):
    """One session's cells, by (model, slot), and when they last changed (a
    tick of their tally's clock), so what was made of them can be kept until then."""

    __slots__ = ("changed",)

    def __init__(self) -> None:
        super().__init__()
        self.changed = 0
SessionKey = tuple[str, str]
"""(project, session id), as the session report keys a row."""


class Tally:
    """The cells of every session, by scope (a project dir): kept as responses
    are counted and taken away. ``timed``: cells keep their times (the session
    and block reports need them; the daily report does not)."""

    def __init__(self, timed: bool) -> None:
        self.timed = timed
        self.scopes: dict[str, dict[SessionKey, Cells]] = {}
        self.responses = 0
        self.cells = 0
        self.clock = 0

    def count(self, scope: str, c: Charge, cost: int, unpriced: bool, sign: int = 1) -> None:
        """Add (or, ``sign`` -1, take away) one response of ``scope``."""
        sessions = self.scopes.get(scope)
        if sessions is None:
            if sign < 0:
                return
            sessions = self.scopes[scope] = {}
        key = (c.project, c.session)
        cells = sessions.get(key)
        if cells is None:
            if sign < 0:
                return
            cells = sessions[key] = Cells()
        at = (c.model, slot_of(c.ts))
        cell = cells.get(at)
        if cell is None:
            if sign < 0:
                return
            cell = cells[at] = Cell(self.timed)
            self.cells += 1
        cell.count(c, cost, unpriced, sign)
        self.clock += 1
        cells.changed = self.clock
        self.responses += sign
        if cell.n <= 0:
            del cells[at]
            self.cells -= 1
            if not cells:
                del sessions[key]
                if not sessions:
                    del self.scopes[scope]

    def sessions(self, names: Iterable[str] | None = None) -> Iterator[tuple[SessionKey, Cells]]:
        """Every session's cells (of the scopes ``names``, else all)."""
        if names is None:
            for sessions in self.scopes.values():
                yield from sessions.items()
            return
        for name in names:
            yield from self.scopes.get(name, {}).items()

    def responses_in(self, names: Iterable[str] | None = None) -> int:
        """How many responses the scopes hold."""
        if names is None:
            return self.responses
        return sum(cell.n for _, cells in self.sessions(names) for cell in cells.values())
