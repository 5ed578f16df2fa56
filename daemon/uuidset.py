"""The dedup set of one transcript file, held in about 30 bytes per uuid.

A ``set`` of uuid strings costs about 145 bytes per uuid (an 85-byte str and
its share of the hash table): 1M entries in 200 sessions took the daemon from
28 MB to 172 MB. Here a canonical uuid (36 characters, lowercase hex, dashes at
8-13-18-23, which is what every agent writes) is packed as 128 bits into two
sorted ``array('Q')`` (16 bytes), with a one-byte-per-slot filter indexed by
the string's own hash (4-8 bytes per uuid) that answers "certainly not here"
for most new uuids without converting them; the exact check is a C bisect.

New uuids first go into a plain set (``recent``), so an append stays a few C
set operations; once it holds more than a quarter of the packed part (at least
``PACK_MIN``) it is packed in one go (C-level sort of the merged keys). Anything
else that a client calls a uuid (legacy formats, uppercase, any string) stays in
a plain set of its own, so membership is exactly that of a set of strings: this
set is what makes resends idempotent, and a hypothesis test holds it to a
``set``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from itertools import chain, repeat
from operator import and_, lshift, or_, rshift

PACK_MIN = 64
_LOW = (1 << 64) - 1
_HEX = frozenset("0123456789abcdef")


def _key(u: str) -> int | None:
    """The 128-bit value of a canonical uuid string; None for anything else."""
    if len(u) != 36 or u[8] != "-" or u[13] != "-" or u[18] != "-" or u[23] != "-":
        return None
    h = u[:8] + u[9:13] + u[14:18] + u[19:23] + u[24:]
    if not _HEX.issuperset(h):
        return None
    return int(h, 16)


def _text(k: int) -> str:
    h = "%032x" % k
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class UuidSet:
    """A set of strings with ``in``, ``add``, ``update``/``|=``, ``isdisjoint``,
    ``len``, iteration and ``clear``: what dedup asks of a set."""

    __slots__ = ("recent", "other", "his", "los", "filter", "mask")

    def __init__(self, items: Iterable[str] = ()) -> None:
        self.recent: set[str] = set()
        self.other: set[str] = set()
        self.his = array("Q")
        self.los = array("Q")
        self.filter = bytearray()
        self.mask = -1  # no packed part: every filter lookup misses
        if items:
            self.recent.update(items)
            self.pack()

    # ------------------------------------------------------------------ queries

    def __contains__(self, u: object) -> bool:
        if u in self.recent or u in self.other:
            return True
        if self.mask < 0 or not isinstance(u, str) or not self.filter[hash(u) & self.mask]:
            return False
        return self._packed(u)

    def _packed(self, u: str) -> bool:
        k = _key(u)
        if k is None:
            return False
        hi = k >> 64
        his = self.his
        i = bisect_left(his, hi)
        n = len(his)
        lo = k & _LOW
        while i < n and his[i] == hi:
            if self.los[i] == lo:
                return True
            i += 1
        return False

    def _maybe_packed(self, items: Iterable[str]) -> list[str]:
        """Those of ``items`` (strings) the filter does not rule out."""
        if self.mask < 0:
            return []
        f, mask = self.filter, self.mask
        return [u for u, hit in zip(items, map(f.__getitem__, map(and_, map(hash, items), repeat(mask)))) if hit]

    def isdisjoint(self, items: Iterable[str]) -> bool:
        items = items if isinstance(items, (set, frozenset)) else set(items)
        if not (self.recent.isdisjoint(items) and self.other.isdisjoint(items)):
            return False
        return not any(map(self._packed, self._maybe_packed([u for u in items if isinstance(u, str)])))

    def __len__(self) -> int:
        return len(self.recent) + len(self.other) + len(self.his)

    def __iter__(self) -> Iterator[str]:
        yield from self.recent
        yield from self.other
        yield from map(_text, map(or_, map(lshift, self.his, repeat(64)), self.los))

    def __repr__(self) -> str:
        return f"UuidSet({len(self)} uuids, {len(self.his)} packed)"

    # ---------------------------------------------------------------- changes

    def add(self, u: str) -> None:
        if u not in self:
            self.recent.add(u)
            self._maybe_pack()

    def update(self, items: Iterable[str]) -> None:
        items = set(items)
        items -= self.recent
        items -= self.other
        if self.mask >= 0:
            items.difference_update(u for u in self._maybe_packed(list(items)) if self._packed(u))
        self.recent |= items
        self._maybe_pack()

    def __ior__(self, items: Iterable[str]) -> UuidSet:
        self.update(items)
        return self

    def clear(self) -> None:
        self.recent.clear()
        self.other.clear()
        self.his = array("Q")
        self.los = array("Q")
        self.filter = bytearray()
        self.mask = -1

    def _maybe_pack(self) -> None:
        if len(self.recent) > max(PACK_MIN, len(self.his) >> 2):
            self.pack()

    def pack(self) -> None:
        """Move every uuid of ``recent`` into the packed arrays (the rest of
        it, not canonical, into ``other``)."""
        recent, self.recent = self.recent, set()
        fresh: list[int] = []
        texts: list[str] = []
        for u in recent:
            k = _key(u) if isinstance(u, str) else None
            if k is None:
                self.other.add(u)
            else:
                fresh.append(k)
                texts.append(u)
        if not fresh:
            return
        old = map(or_, map(lshift, self.his, repeat(64)), self.los)
        keys = sorted(chain(old, fresh))
        self.his = array("Q", map(rshift, keys, repeat(64)))
        self.los = array("Q", map(and_, keys, repeat(_LOW)))
        size = 1 << max(6, (4 * len(keys) - 1).bit_length())  # a power of two, 4-8 slots a uuid
        if size != len(self.filter):  # grown: every packed uuid's slot again
            self.filter = bytearray(size)
            texts = list(map(_text, keys))
        self.mask = size - 1
        f, mask = self.filter, self.mask
        for i in map(and_, map(hash, texts), repeat(mask)):
            f[i] = 1

    @property
    def nbytes(self) -> int:
        """Bytes held by the packed part (what the 16-byte keys and filter cost)."""
        return self.his.itemsize * len(self.his) * 2 + len(self.filter)
