"""Tokens and dollars spent, as reports carry them: on the wire (``Spent``,
the daemon's answer to ``Spend``) and in ``sessiond usage --json`` alike.

Rows of a daily, monthly or session report, and 5-hour billing blocks; the
computation is ``sessiond.store.spend`` (not the bytes on disk: those are
``records.Usage``).
"""


from typing import Annotated, Literal

import msgspec

REPORTS = ("daily", "monthly", "session", "blocks")
Report = Literal["daily", "monthly", "session", "blocks"]
MAX_SPEND_ROWS = 100_000
"""Rows (or blocks) one answer carries at most; a report with more is refused
and asked narrower (``--since``, ``--cwd``)."""
MAX_TZ_CHARS = 64
Day = Annotated[str, msgspec.Meta(pattern=r"^\d{4}-\d{2}-\d{2}$")]
"""A calendar day, ``YYYY-MM-DD``."""
TimeZoneName = Annotated[str, msgspec.Meta(max_length=MAX_TZ_CHARS)]


class ModelSpend(msgspec.Struct, rename="camel"):
    """One model's part of a row."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    unpriced: bool = False


class Row(msgspec.Struct, rename="camel"):
    """One line of a report: its key (a day ``YYYY-MM-DD``, a month ``YYYY-MM``
    or a session id, with its project), the four token counts, their total, the
    cost in USD, the models used (and per model when asked), and the models
    the price table did not know (their tokens counted, their cost not)."""

    key: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    models: list[str] = []
    unpriced: list[str] = []
    responses: int = 0
    project: str | None = None
    first_activity: str | None = None
    last_activity: str | None = None
    breakdown: list[ModelSpend] | None = None


class BurnRate(msgspec.Struct, rename="camel"):
    """How fast the active block spends: all tokens and input+output per
    minute, and USD per hour, over its first to last response."""

    tokens_per_minute: float
    tokens_per_minute_for_indicator: float
    cost_per_hour: float


class Projection(msgspec.Struct, rename="camel"):
    """The active block's tokens and cost at its end at the current rate."""

    total_tokens: int
    total_cost: float
    remaining_minutes: int


class Block(msgspec.Struct, rename="camel"):
    """A 5-hour billing window (or the gap between two): start, end, the last
    response in it, whether it is the active one, and its sums."""

    id: str
    start_time: str
    end_time: str
    actual_end_time: str | None = None
    is_active: bool = False
    is_gap: bool = False
    entries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_tokens: int = 0
    cache_read_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    models: list[str] = []
    unpriced: list[str] = []
    burn_rate: BurnRate | None = None
    projection: Projection | None = None



class SpendReport(msgspec.Struct, rename="camel"):
    """One report: which, how it was computed (``daemon``: from the sums it
    keeps; ``files``: read now), the days' time zone, the price table used,
    the rows and their total (or the blocks), and the models left unpriced."""

    report: str
    source: str
    timezone: str
    prices: str
    rows: list[Row] = []
    totals: Row | None = None
    blocks: list[Block] = []
    unpriced: list[str] = []
    responses: int = 0
