"""The price of one API response: a per-model table of USD per token.

The table ships with the package (``prices.json``: its source and date are in
it); ``--prices FILE`` names another of the same shape. A model the table does
not know is never priced as zero silently: ``Prices.find`` answers None and the
reports name the model as unpriced.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

PRICES_FILE = Path(__file__).with_name("prices.json")
MAX_PRICES_BYTES = 4 * 1024 * 1024
"""A prices file bigger than this is refused unread (the shipped one is a few KiB)."""
TIER = 200_000
"""Tokens of one kind in one response above which an ``...Above200k`` price applies."""
ONE_HOUR_CACHE_FACTOR = 2.0
"""A 1-hour cache write costs this many times the input price (ccusage's ``cost.rs``)."""
_DATE_SUFFIX = re.compile(r"-\d{8}$")
_PROVIDER_SPELLING = re.compile(
    r"(?:anthropic/|(?:global\.)?anthropic\.)?(?P<model>claude-[a-z0-9-]+?)"
    r"(?:-v\d+(?::\d+)?(?=@|$))?(?:@(?P<version>\d{8}|default))?(?:\[1m\])?")
"""A model id as Claude Code records it on another provider: Google Vertex AI's
``claude-sonnet-4@20250514`` (``@default``; ``claude-3-5-sonnet-v2@20241022``),
Amazon Bedrock's ``anthropic.claude-opus-4-6-v1`` and global profile
``global.anthropic.claude-sonnet-4-5-20250929-v1:0``, a gateway's
``anthropic/claude-opus-4-6``, the ``[1m]`` long-context alias. ccusage prices
each as the model itself. Bedrock's regional profiles (``us.``, ``eu.``, ...)
are not among them: ccusage prices some above the model (a regional premium)."""

Price = msgspec.Meta(ge=0)


class Rate(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True):
    """One model's prices in USD per token; the ``*_above_200k`` ones, when
    set, price the part of one response's tokens of that kind past 200,000."""

    input: float
    output: float
    cache_creation: float
    cache_read: float
    input_above_200k: float | None = msgspec.field(default=None, name="inputAbove200k")
    output_above_200k: float | None = msgspec.field(default=None, name="outputAbove200k")
    cache_creation_above_200k: float | None = msgspec.field(default=None, name="cacheCreationAbove200k")
    cache_read_above_200k: float | None = msgspec.field(default=None, name="cacheReadAbove200k")
    fast_multiplier: float = 1.0


class PriceTable(msgspec.Struct, forbid_unknown_fields=True):
    """A prices file: where its figures come from, when they were taken, and
    the rates by model id."""

    source: str
    date: str
    models: dict[str, Rate]
    about: str = ""


class BadPrices(ValueError):
    """A prices file that cannot be read or is not a price table (one line for the CLI)."""


def _tiered(tokens: int, base: float, above: float | None) -> float:
    if not tokens:
        return 0.0
    if above is not None and tokens > TIER:
        return TIER * base + (tokens - TIER) * above
    return tokens * base


class Prices:
    """A loaded price table and its lookup: a model id as Claude Code writes it
    (``claude-sonnet-4-5-20250929``) finds its own entry, else the entry of the
    id without its date suffix, else (another provider's spelling of it,
    ``_PROVIDER_SPELLING``) those of the model it names; nothing else (an
    unknown model stays unknown)."""

    def __init__(self, table: PriceTable, path: Path) -> None:
        self.table = table
        self.path = path
        self._cache: dict[str, Rate | None] = {}

    @classmethod
    def load(cls, path: Path | None = None) -> Prices:
        """The shipped table, or the file at ``path``; ``BadPrices`` when it
        cannot be read or decoded."""
        path = path or PRICES_FILE
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_PRICES_BYTES + 1)
        except OSError as exc:
            raise BadPrices(f"{path}: {exc.strerror or exc}") from None
        if len(data) > MAX_PRICES_BYTES:
            raise BadPrices(f"{path}: over {MAX_PRICES_BYTES} bytes")
        try:
            table = msgspec.json.decode(data, type=PriceTable)
        except msgspec.DecodeError as exc:
            raise BadPrices(f"{path}: not a price table: {exc}") from None
        return cls(table, path)

    def find(self, model: str) -> Rate | None:
        """The rate for ``model``, or None when the table has none."""
        try:
            return self._cache[model]
        except KeyError:
            pass
        rate = self._own(model)
        if rate is None and (m := _PROVIDER_SPELLING.fullmatch(model)) is not None:
            named = m["model"] if m["version"] in (None, "default") else f"{m['model']}-{m['version']}"
            if named != model:
                rate = self._own(named)
        if len(self._cache) < 4096:
            self._cache[model] = rate
        return rate

    def _own(self, model: str) -> Rate | None:
        """The entry of ``model``, else of ``model`` without its date suffix."""
        models = self.table.models
        rate = models.get(model)
        return models.get(_DATE_SUFFIX.sub("", model)) if rate is None else rate

    def cost(self, rate: Rate, input_tokens: int, output_tokens: int, cache_5m: int, cache_1h: int,
             cache_read: int, fast: bool) -> float:
        """One response's cost, as ccusage's ``calculate_cost_from_tokens`` computes it."""
        one_hour = rate.input * ONE_HOUR_CACHE_FACTOR
        one_hour_above = rate.input_above_200k * ONE_HOUR_CACHE_FACTOR if rate.input_above_200k is not None else None
        total = (_tiered(input_tokens, rate.input, rate.input_above_200k)
                 + _tiered(output_tokens, rate.output, rate.output_above_200k)
                 + _tiered(cache_5m, rate.cache_creation, rate.cache_creation_above_200k)
                 + _tiered(cache_1h, one_hour, one_hour_above)
                 + _tiered(cache_read, rate.cache_read, rate.cache_read_above_200k))
        return total * (rate.fast_multiplier if fast else 1.0)
