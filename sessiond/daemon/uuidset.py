"""The dedup set of one transcript file, held in about 30 bytes per uuid.

A ``set`` of uuid strings costs about 145 bytes per uuid (an 85-byte str and
its share of the hash table): a million uuids held for dedup would weigh some
145 MB. Here a canonical uuid (36 characters, lowercase hex, dashes at
8-13-18-23, which is what every agent writes) is packed as a 24-byte record,
the string's own hash (8 bytes) and its 128 bits (16), appended to one of many
``bytearray`` buckets chosen by that hash. A bitmap filter indexed by other
bits of the hash (8-32 bits a uuid) rules out most new uuids at once; the rest
search their bucket for the hash bytes (``bytearray.find``, no object made per
entry searched) and compare the 16 bytes only on a match. Nothing is sorted or
merged: a uuid is packed once, and its record moves only when the buckets grow
(4x steps).

Buckets hold 32-128 records on average (0.8-3 KB): a buffer over 512 bytes
comes from malloc, not from pymalloc's arenas. Smaller buckets would be
small-object allocations filling pymalloc arenas, and an arena goes back to the
system only once every block in it is free: one long-lived object allocated
during a big load would keep its arena, and an idle daemon would stay far above
its fresh RSS after every session was evicted.
Malloc's free pages go back with ``malloc_trim`` (``sessiond/daemon/memory.py``).

New uuids first go into a plain set (``recent``), so an append stays a few C
set operations. Packing costs a few microseconds a uuid, so it is not done on
the append path: ``packed_with`` builds the packed state of a snapshot of
``recent`` (meant for a worker thread: it only reads this set) and ``adopt``
swaps it in on the loop; ``sessiond/daemon/compaction.py`` does that for sessions gone
quiet, and for a busy set once ``recent`` grows past ``compaction.HOT_MIN``. Only past
``SYNC_MAX`` (nobody compacting it) does an add pack on the spot. Anything else a client calls a uuid (legacy
formats, uppercase, any string) stays in a plain set of its own (``other``), so
membership is exactly that of a set of strings: this set is what makes resends
idempotent, and a hypothesis test holds it to a ``set``.

The daemon makes ``DedupSet``: the compiled set of ``_uuidset.c`` when the install
built it (a C compiler and Python's headers were there), this class otherwise (or
with ``SESSIOND_UUIDSET=python`` in the environment). The compiled one keeps the
same uuids as 16-byte keys of one open-addressing table, added on the spot, with
nothing to pack (packing in Python, a few microseconds a uuid, is the costly
part of this class). Both have this interface and are held to a ``set`` by the
same test.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Iterator
from itertools import islice, repeat
from operator import and_, methodcaller, rshift
from sys import getsizeof
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

    from ._uuidset import UuidSet as CompiledUuidSet

    AnyUuidSet: TypeAlias = "UuidSet | CompiledUuidSet"
    """Either dedup set (``DedupSet`` is one of the two)."""

PACK_MIN = 128
"""Fewer unpacked uuids than this are not worth a packing job."""
SYNC_MAX = 1 << 17
"""Unpacked uuids at which an add packs at once (about 17 MB): a bound, not the
usual way (see ``compaction``)."""
RECORD = 24  # 8 bytes of the string's hash, 16 of the uuid
PER_BUCKET = 128  # records per bucket, on average, before the buckets grow
BUCKET_GROWTH = 4
FILTER_SHIFT = 24  # the filter takes the hash's bits from here, the buckets its low bits
FILTER_MIN_BITS = 8  # filter bits per packed uuid below which the filter grows (to 16-32 a uuid)
_HEX = frozenset("0123456789abcdef")
_hash_bytes = methodcaller("to_bytes", 8, "little", signed=True)


def _key(u: str) -> bytes | None:
    """The 16 bytes of a canonical uuid string; None for anything else."""
    if len(u) != 36 or u[8] != "-" or u[13] != "-" or u[18] != "-" or u[23] != "-":
        return None
    h = u[:8] + u[9:13] + u[14:18] + u[19:23] + u[24:]
    if not _HEX.issuperset(h):
        return None
    return bytes.fromhex(h)


def _all_keys(items: list[str]) -> bytes | None:
    """The 16-byte keys of ``items`` joined, when every one is a canonical
    uuid string (the usual case), checked with a few C-level passes over them
    all; None otherwise."""
    if not all(map(isinstance, items, repeat(str))):
        return None
    n = len(items)
    text = "".join(items)
    if len(text) != 36 * n or any(text[i::36] != "-" * n for i in (8, 13, 18, 23)):
        return None
    digits = text.replace("-", "")
    if len(digits) != 32 * n or digits != digits.lower():
        return None
    try:
        raw = bytes.fromhex(digits)
    except ValueError:
        return None
    return raw if len(raw) == 16 * n else None  # whitespace, which fromhex skips, is no uuid


def _text(key: bytes | bytearray) -> str:
    h = key.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class UuidSet:
    """A set of strings with ``in``, ``add``, ``update``/``|=``, ``isdisjoint``,
    ``len``, iteration and ``clear``: what dedup asks of a set."""

    __slots__ = ("recent", "other", "buckets", "packed", "filter", "fmask", "generation", "packing")

    def __init__(self, items: Iterable[str] = ()) -> None:
        self.recent: set[str] = set()
        self.other: set[str] = set()
        self.buckets: list[bytearray] = [bytearray()]
        self.packed = 0
        self.filter = bytearray(1)
        self.fmask = 0  # bits of the filter, less one; one clear bit: every lookup misses
        self.generation = 0  # bumped by clear(): a packing job started before is dropped
        self.packing = False  # a packing job of this set is in flight
        if items:
            self.recent.update(items)
            self.pack()

    @classmethod
    def unpacked(cls, items: set[str]) -> UuidSet:
        """A set holding ``items`` (taken, not copied) unpacked: a scan's
        result, packed later in the background."""
        out = cls()
        out.recent = items
        return out

    # ------------------------------------------------------------------ queries

    def __contains__(self, u: object) -> bool:
        if u in self.recent or u in self.other:
            return True
        return isinstance(u, str) and self._packed(u)

    def _packed(self, u: str) -> bool:
        h = hash(u)
        slot = (h >> FILTER_SHIFT) & self.fmask
        if not self.filter[slot >> 3] >> (slot & 7) & 1:
            return False
        bucket = self.buckets[h & (len(self.buckets) - 1)]
        pattern = _hash_bytes(h)
        i = bucket.find(pattern)
        key = None
        while i >= 0:
            if i % RECORD == 0:
                if key is None:
                    key = _key(u)
                    if key is None:
                        return False
                if bucket[i + 8:i + RECORD] == key:
                    return True
            i = bucket.find(pattern, i + 1)
        return False

    def _candidates(self, items: list[str]) -> list[str]:
        """Those of ``items`` (strings) the filter does not rule out."""
        if not self.packed:
            return []
        f, mask = self.filter, self.fmask
        return [u for u in items
                if isinstance(u, str) and f[(slot := (hash(u) >> FILTER_SHIFT) & mask) >> 3] >> (slot & 7) & 1]

    def isdisjoint(self, items: Iterable[str]) -> bool:
        items = items if isinstance(items, (set, frozenset)) else set(items)
        if not (self.recent.isdisjoint(items) and self.other.isdisjoint(items)):
            return False
        return not any(map(self._packed, self._candidates(list(items))))

    def __len__(self) -> int:
        return len(self.recent) + len(self.other) + self.packed

    def __iter__(self) -> Iterator[str]:
        yield from self.recent
        yield from self.other
        for bucket in self.buckets:
            for i in range(0, len(bucket), RECORD):
                yield _text(bucket[i + 8:i + RECORD])

    def __repr__(self) -> str:
        return f"UuidSet({len(self)} uuids, {self.packed} packed)"

    @property
    def nbytes(self) -> int:
        """Bytes the packed part takes: its buckets and filter as allocated
        (objects and spare capacity included), the bucket list."""
        return sum(map(getsizeof, self.buckets)) + getsizeof(self.filter) + getsizeof(self.buckets)

    # ---------------------------------------------------------------- changes

    def add(self, u: str) -> None:
        if u not in self:
            self.recent.add(u)
            if len(self.recent) >= SYNC_MAX and not self.packing:
                self.pack()

    def update(self, items: Iterable[str]) -> None:
        items = set(items)
        items -= self.recent
        items -= self.other
        if self.packed:
            items.difference_update([u for u in self._candidates(list(items)) if self._packed(u)])
        self.add_new(items)

    def add_new(self, items: set[str]) -> None:
        """Add ``items``, known to be in no part of the set (``isdisjoint`` said
        so just before): no second look."""
        self.recent |= items
        if len(self.recent) >= SYNC_MAX and not self.packing:
            self.pack()

    def __ior__(self, items: Iterable[str]) -> UuidSet:
        self.update(items)
        return self

    def clear(self) -> None:
        self.recent.clear()
        self.other.clear()
        self.buckets = [bytearray()]
        self.packed = 0
        self.filter = bytearray(1)
        self.fmask = 0
        self.generation += 1

    def packed_with(self, items: list[str]) -> UuidSet:
        """A new set: this one's packed part and ``items`` packed (the strings
        among them that are no uuids in its ``other``). Reads this set only,
        so it may run in a worker while the loop goes on using it (nothing
        but ``adopt`` or ``clear`` changes a packed part while ``packing``)."""
        out = UuidSet()
        out.buckets = [bytearray(b) for b in self.buckets]
        out.packed = self.packed
        out.filter = bytearray(self.filter)
        out.fmask = self.fmask
        out.recent = set(items)
        out.pack()
        return out

    def adopt(self, built: UuidSet, generation: int, items: list[str]) -> None:
        """Take the packed part ``packed_with(items)`` built, unless the set
        was cleared since; those items leave ``recent``."""
        self.packing = False
        if generation != self.generation:
            return
        self.buckets, self.packed, self.filter, self.fmask = built.buckets, built.packed, built.filter, built.fmask
        self.other |= built.other
        self.recent.difference_update(items)

    def pack(self) -> None:
        """Move the uuids of ``recent`` into the buckets (the strings that are
        not canonical uuids into ``other``)."""
        recent, self.recent = list(self.recent), set()
        raw = _all_keys(recent)
        if raw is None:  # not all canonical: sort them out one by one
            keys = [_key(u) if isinstance(u, str) else None for u in recent]
            self.other.update(u for u, k in zip(recent, keys) if k is None)
            recent = [u for u, k in zip(recent, keys) if k is not None]
            raw = b"".join(k for k in keys if k is not None)
        if not recent:
            return
        self._grow(self.packed + len(recent))
        hashes = list(map(hash, recent))
        self._insert(hashes, _records(hashes, raw))
        self.packed += len(recent)

    def _insert(self, hashes: list[int], records: bytes | bytearray) -> None:
        """Append each record (``hashes[i]`` is the hash in record ``i``) to
        its bucket and mark its filter slot: the one per-uuid Python loop."""
        buckets, bmask = self.buckets, len(self.buckets) - 1
        with memoryview(records) as view:
            for h, at in zip(hashes, range(0, len(records), RECORD)):
                buckets[h & bmask] += view[at:at + RECORD]
        self._mark(hashes)

    def _mark(self, hashes: list[int]) -> None:
        f = self.filter
        for slot in map(and_, map(rshift, hashes, repeat(FILTER_SHIFT)), repeat(self.fmask)):
            f[slot >> 3] |= 1 << (slot & 7)

    def _grow(self, n: int) -> None:
        """Buckets and filter for ``n`` packed uuids. The buckets grow 4x when
        their average passes ``PER_BUCKET`` (every record placed again: a
        uuid moves a third of a time more in all; doubling cost a busy set,
        packed in steps, a quarter more CPU); the filter grows to 16-32 bits a
        uuid when it would hold fewer than ``FILTER_MIN_BITS`` (only its bits
        set again)."""
        count = len(self.buckets)
        while n > PER_BUCKET * count:
            count *= BUCKET_GROWTH
        bits = 8 * len(self.filter)
        if FILTER_MIN_BITS * n > bits:
            bits = 1 << max(9, (2 * FILTER_MIN_BITS * n - 1).bit_length())
        if count != len(self.buckets):
            old = self.buckets
            self.buckets = [bytearray() for _ in range(count)]
            self.filter = bytearray(bits // 8)
            self.fmask = bits - 1
            for bucket in old:
                self._insert(_hashes_of(bucket), bucket)
        elif bits != 8 * len(self.filter):
            self.filter = bytearray(bits // 8)
            self.fmask = bits - 1
            for bucket in self.buckets:
                self._mark(_hashes_of(bucket))


def _hashes_of(bucket: bytearray) -> list[int]:
    with memoryview(bucket) as view, view.cast("q") as words:
        return words[0::RECORD // 8].tolist()


def _records(hashes: list[int], keys: bytes) -> bytearray:
    """Records (hash, key) of a batch, interleaved by strided copies of whole
    columns: no object per uuid."""
    out = bytearray(RECORD * len(hashes))
    with memoryview(out) as view, view.cast("q") as words, memoryview(keys) as kview, kview.cast("q") as kwords:
        words[0::3] = array("q", hashes)
        words[1::3] = kwords[0::2]
        words[2::3] = kwords[1::2]
    return out


def _compiled() -> type[CompiledUuidSet] | None:
    if os.environ.get("SESSIOND_UUIDSET") == "python":
        return None
    try:
        from ._uuidset import UuidSet as compiled
    except ImportError:  # installed where nothing could compile it
        return None
    return compiled


DedupSet: type[UuidSet] | type[CompiledUuidSet] = _compiled() or UuidSet
"""The dedup set the daemon makes (see the module's docstring)."""
IMPLEMENTATION = "python" if DedupSet is UuidSet else "compiled"
SCAN_CHUNK = 4096
"""Uuids a scan's compiled set takes in one call (a call holds the GIL)."""


def dedup_set(items: set[str]) -> AnyUuidSet:
    """The dedup set of a scan's uuids, made where the scan ran (a worker
    thread, for a big file). The Python set takes ``items`` as they are (packed
    later); the compiled one is filled ``SCAN_CHUNK`` at a time, so the loop
    gets the GIL between chunks: one call over a million uuids (random reads of
    the strings, random writes to the table) would hold it for a good part of
    a second."""
    if DedupSet is UuidSet:
        return UuidSet.unpacked(items)
    it = iter(items)
    out = DedupSet(islice(it, SCAN_CHUNK))
    while chunk := list(islice(it, SCAN_CHUNK)):
        out.update(chunk)
    return out
