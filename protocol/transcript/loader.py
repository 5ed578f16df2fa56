"""SPEC 4 steps 1-2: read a transcript into a ``uuid → Entry`` map, cheaply.

Why it is built this way (figures: 100 MB of ~2 KB lines, 52,000 lines, this 2-core VM):

- Every line is decoded with ONE typed msgspec decoder of the few header fields the
  chain needs (:class:`Entry`); msgspec skips everything else without building it.
  Only the entries that end up in the resumed conversation are ever decoded into
  dicts (deserialize.materialize).
- Reading the bytes is blocks.py's: the part of the file that is kept is mapped
  read-only and an entry keeps a reference to its block of lines (:class:`Lines`)
  and its line number; ``Entry.raw`` slices its bytes out on demand (``raw_view``:
  without a copy). History the skip (below) discards is read into ONE reused buffer.
- Lines are decoded ``_RUN`` (256) at a time by ONE ``Decoder.decode_lines`` call
  instead of one call each. That call does not tell where lines are, and it accepts
  glued values (``{..}{..}``) and values spread over lines, so a run of lines takes
  that path only when each of its lines is known to be one value: every line starts
  with ``{`` and ends with ``}`` (then each newline lies between two top-level
  values: a ``}`` ending a line is structural, as JSON strings cannot hold a raw
  newline, and no ``{`` may follow it inside a value), the run decodes, and it
  yields exactly one value per line. Any other line (torn, blank, not an object)
  is decoded on its own, and a run that fails (a glued line: one value too many;
  a field of a surprising type) line by line. Real transcripts have glued lines
  (one in the 6,706 lines of the corpus).
- A torn or glued line (not exactly one JSON object) is skipped and counted, never
  fatal. A line that IS a JSON object but has a field of a surprising type (a numeric
  ``uuid``, a string ``message`` ...) is not thrown away: it is re-read generically and
  only the fields of the right type are kept (:func:`_lenient`).
- ``attribution-snapshot`` lines: only the last one is kept (``Loaded.attribution``).
- Metadata (summary, custom-title, ai-title, tag, agent-*, mode, worktree-state,
  pr-link, last-prompt): the raw line of the latest entry of each kind, over the WHOLE
  file, also in a region the skip below discards. SPEC lists the kinds to collect there
  without ai-title and last-prompt; we collect those too, or the skip path would not
  give the same result as a full load.
- Files over ``skip_threshold`` (5 MB): at each non-sidechain ``compact_boundary``
  without preserved messages the map is emptied — pre-compaction history is not needed
  to resume — while metadata, the attribution snapshot, the skipped-line count and
  the "every entry is a sidechain" flag keep accumulating. A full load prunes exactly
  that history in ``relink.apply_compaction`` (as Claude Code does), so both paths
  build the same map. The last such boundary is found first (:func:`last_skip_boundary`)
  and the history before it is read through one reused buffer, so peak memory is
  bound by what the resume keeps, not by the file. What the skip cannot know is
  whether step 3 will ask for a uuid it discarded, or whether a boundary it skipped at
  is overwritten later by a line reusing its uuid; ``Loaded.discarded``/``unsure`` let
  resume.py load again without the skip in those (malformed-file) cases.
- Duplicate uuids: the last line wins and takes the file position of that last line.
- ``Entry.index`` is the line number (blank lines not counted): file order.
"""

from __future__ import annotations

import mmap
import os
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgspec

from .blocks import Block, Lines, kept_blocks, map_file, mapped_blocks, reused_blocks
from .entries import COMPACT_BOUNDARY, TRANSCRIPT_TYPES, decode_object
from .jsonl import CHUNK
from .metadata import METADATA_KINDS

SKIP_THRESHOLD: Final = 5 * 1024 * 1024
"""Files larger than this skip pre-compaction history while reading (SPEC 4 step 1)."""

ATTRIBUTION_SNAPSHOT: Final = "attribution-snapshot"
TURN_DURATION: Final = "turn_duration"


class MessageHeader(msgspec.Struct, gc=False):
    id: str | None = None


class PreservedMessages(msgspec.Struct, gc=False):
    anchorUuid: str | None = None
    uuids: list[str] | None = None


class PreservedSegment(msgspec.Struct, gc=False):
    headUuid: str | None = None
    anchorUuid: str | None = None
    tailUuid: str | None = None


class CompactMetadata(msgspec.Struct, gc=False):
    preservedMessages: PreservedMessages | None = None
    preservedSegment: PreservedSegment | None = None

    @property
    def preserves(self) -> bool:
        return self.preservedMessages is not None or self.preservedSegment is not None


class SnipMetadata(msgspec.Struct, gc=False):
    removedUuids: list[str] | None = None


class Entry(msgspec.Struct, gc=False, rename={"src": "~sessiond.src", "index": "~sessiond.index"}):
    """The chain fields of one uuid-bearing line; everything else stays in ``raw``.

    ``parentUuid`` is mutable on purpose: step 3 relinks in memory. ``src`` and
    ``index`` (line number in the file) are filled by the loader, never from JSON:
    ``src`` is the block of lines the line was read into (or the line's own bytes);
    only transcript messages get one.
    """

    type: str | None = None
    subtype: str | None = None
    uuid: str | None = None
    parentUuid: str | None = None
    logicalParentUuid: str | None = None
    isSidechain: bool | None = None
    timestamp: str | None = None
    message: MessageHeader | str | None = None
    sourceToolAssistantUUID: str | None = None
    compactMetadata: CompactMetadata | None = None
    snipMetadata: SnipMetadata | None = None
    messageCount: int | None = None
    src: Any = None
    index: int = 0

    @property
    def raw(self) -> bytes:
        """The line's bytes (transcript messages; ``b""`` for other entries)."""
        src = self.src
        if type(src) is Lines:
            return src.line(self.index)
        return src if type(src) is bytes else b""

    @raw.setter
    def raw(self, line: bytes) -> None:
        self.src = line

    @property
    def raw_view(self) -> memoryview | bytes:
        """``raw`` without copying it out of the read buffer: for decoders."""
        src = self.src
        if type(src) is Lines:
            return src.view(self.index)
        return src if type(src) is bytes else b""

    @property
    def msg_id(self) -> str | None:
        m = self.message
        return m.id if type(m) is MessageHeader else None

    @property
    def is_compact_boundary(self) -> bool:
        return self.type == "system" and self.subtype == COMPACT_BOUNDARY


class Loaded(msgspec.Struct):
    """What steps 1-2 produce."""

    entries: dict[str, Entry]
    """uuid → entry, in file order."""
    boundaries: list[str]
    """uuids of the compact boundaries still in ``entries``, in file order."""
    snips: list[str]
    """uuids of entries carrying ``snipMetadata``."""
    metadata: dict[str, bytes]
    """kind → raw line of its latest entry in the whole file."""
    checkpoints: dict[str, int]
    """turn_duration uuid → messageCount over the whole file (step 8 after a compaction)."""
    attribution: bytes | None
    """The last attribution-snapshot line; the others are dropped."""
    skipped: int
    """Lines that are not one JSON object (torn, glued, garbage)."""
    lines: int
    sidechain_only: bool
    """Every uuid-bearing entry is a sidechain: a subagent transcript (SPEC 4 step 5)."""
    discarded: bool
    """The >5 MB skip threw history away while reading."""
    unsure: bool = False
    """The skip may have changed the result (a boundary's uuid was reused later)."""


_decoder = msgspec.json.Decoder(Entry)


def _typed(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) else None


def _convert(value: Any, kind: type) -> Any:
    if not isinstance(value, dict):
        return None
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError:
        return None


def _lenient(line: bytes | memoryview) -> Entry | None:
    """A JSON object whose fields did not all have the expected types: keep what fits."""
    obj = decode_object(line)
    if obj is None:
        return None
    message = obj.get("message")
    if isinstance(message, dict):
        header: MessageHeader | str | None = MessageHeader(_typed(message.get("id"), str))
    else:
        header = _typed(message, str)
    return Entry(
        type=_typed(obj.get("type"), str),
        subtype=_typed(obj.get("subtype"), str),
        uuid=_typed(obj.get("uuid"), str),
        parentUuid=_typed(obj.get("parentUuid"), str),
        logicalParentUuid=_typed(obj.get("logicalParentUuid"), str),
        isSidechain=_typed(obj.get("isSidechain"), bool),
        timestamp=_typed(obj.get("timestamp"), str),
        message=header,
        sourceToolAssistantUUID=_typed(obj.get("sourceToolAssistantUUID"), str),
        compactMetadata=_convert(obj.get("compactMetadata"), CompactMetadata),
        snipMetadata=_convert(obj.get("snipMetadata"), SnipMetadata),
        messageCount=_typed(obj.get("messageCount"), int),
    )


def parse_line(line: bytes | memoryview) -> Entry | None:
    """The header of one line, or None when the line is not one JSON object."""
    try:
        return _decoder.decode(line)
    except msgspec.ValidationError:
        return _lenient(line)
    except msgspec.DecodeError:
        return None


def load_entries(
    path: Path | str, *, skip_threshold: float = SKIP_THRESHOLD, chunk: int = CHUNK
) -> Loaded:
    """Steps 1-2 over the file at ``path`` (see the module docstring).

    The skip (files over ``skip_threshold``) starts at the last skip boundary, found
    before the pass by searching the bytes backwards, so nothing before it is ever
    kept: peak memory is bound by what the resume keeps, not by the file. The search
    only covers the second half of the file: a boundary in the first half is met by
    the pass itself, which empties the map there (and drops the mapping's pages
    before it); what it built before is then no bigger than what comes after. That
    pass keeps what the skip would have discarded, so it also notices more uuid
    reuses (``unsure``) than the skip; only then is the file read again with the
    whole search, for exactly the skip's result.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        skipping = size > skip_threshold
        mapped = map_file(fd, size)
        if not skipping:
            return _pass(fd, mapped, size, False, chunk, None).result()
        if mapped is None:
            return _pass(fd, None, size, True, chunk, last_skip_boundary(path)).result()
        skip_to = _last_skip_boundary(mapped, size // 2)
        load = _pass(fd, mapped, size, True, chunk, skip_to)
        if skip_to is None and load.discarded and load.unsure:
            load = _pass(fd, mapped, size, True, chunk, _last_skip_boundary(mapped))
        return load.result()
    finally:
        os.close(fd)


def _pass(fd: int, mapped: mmap.mmap | None, size: int, skipping: bool, chunk: int, skip_to: str | None) -> _Load:
    """One read of the file: the history before ``skip_to`` discarded, the rest kept."""
    load = _Load(skipping, max(chunk, 1), mapped)
    offset: int | None = 0
    if skip_to is not None:
        offset = load.discard(reused_blocks(fd, 0, load.chunk), skip_to)
    if offset is not None:
        if mapped is not None:
            load.keep(mapped_blocks(mapped, fd, offset, size, load.chunk))
        else:
            load.keep(kept_blocks(fd, offset, load.chunk))
    return load


_COMMON: Final = {kind: kind for kind in TRANSCRIPT_TYPES - {"system"}}
"""Transcript messages that need no look at ``subtype`` (the loader's fast path),
each to the one str object all their entries share."""

_SKIPPED: Final = Entry()
"""Stands for a line that is not one JSON object in a decoded block: no type, no uuid."""
_BLANK: Final = Entry()
"""Stands for a whitespace-only line (not counted as skipped)."""


def _scan(buf: mmap.mmap | bytes, start: int, stop: int) -> tuple[array, list[int]]:
    """Where the lines of ``buf[start:stop]`` end (a blank line too), and which of
    them do not start with ``{`` and end with ``}``: those are never decoded in a batch."""
    ends: list[int] = []
    odd: list[int] = []
    append = ends.append
    find = buf.find
    s = start
    while (n := find(b"\n", s, stop)) >= 0:
        if buf[s] != 123 or buf[n - 1] != 125:  # b"{", b"}" (a blank line fails the first)
            odd.append(len(ends))
        append(n)
        s = n + 1
    if s < stop:  # the last line of the file, without a newline
        if buf[s] != 123 or buf[stop - 1] != 125:
            odd.append(len(ends))
        append(stop)
    return array("q", ends), odd  # kept with the block: 8 bytes a line, not 40


_RUN: Final = 256
"""Lines decoded per call: a damaged line sends only its run of lines back to
one call per line. (Halving a failed run down to the damage cost more: the parts
that decode are decoded again at every level.)"""


def _one(line: memoryview) -> Entry:
    """One line as parse_line reads it; ``_SKIPPED``/``_BLANK`` when it is not an object."""
    try:
        return _decoder.decode(line)
    except msgspec.ValidationError:
        e = _lenient(line)  # valid JSON, unexpected shape
        return _SKIPPED if e is None else e  # None: not an object at all (an array ...)
    except msgspec.DecodeError:
        return _SKIPPED if bytes(line).strip() else _BLANK


def _batch(view: memoryview, ends: array, start: int, stop: int, a: int, b: int) -> list[Entry]:
    """Lines ``a`` to ``b - 1`` of a block (``start``: where line 0 begins; ``stop``:
    its end), each starting with ``{`` and ending with ``}``: decoded ``_RUN`` lines
    per call where that yields one value per line, else line by line."""
    values: list[Entry] = []
    decode_lines = _decoder.decode_lines
    for i in range(a, b, _RUN):
        j = min(i + _RUN, b)
        lo = ends[i - 1] + 1 if i else start
        try:
            run = decode_lines(view[lo : min(ends[j - 1] + 1, stop)])
        except msgspec.DecodeError:  # ValidationError too: a field of a surprising type
            run = None
        if run is not None and len(run) == j - i:
            values += run
        else:
            values += [_one(view[ends[k - 1] + 1 if k else start : ends[k]]) for k in range(i, j)]
    return values


class _Load:
    """The state of one pass: the map and everything collected over the whole file."""

    def __init__(self, skipping: bool, chunk: int, mapped: mmap.mmap | None = None) -> None:
        self.skipping = skipping
        self.chunk = chunk
        self.mapped = mapped
        self.entries: dict[str, Entry] = {}
        self.boundaries: list[str] = []
        self.snips: list[str] = []
        self.metadata: dict[str, bytes] = {}
        self.checkpoints: dict[str, int] = {}
        self.attribution: bytes | None = None
        self.skipped = 0
        self.lines = 0
        self.has_any = self.has_main = self.discarded = self.unsure = False

    def decode(self, block: Block, first: int) -> tuple[list[Entry], Lines]:
        """The block's lines decoded (``_SKIPPED``/``_BLANK`` for a line that is not
        an object) and where they are; ``first`` is the number of its first line.

        Runs of lines that each start with ``{`` and end with ``}`` are decoded in
        one call (:func:`_batch`), any other line on its own. A blank line is not a
        line (it gets no number)."""
        buf, view, start, stop = block.buf, block.view, block.start, block.stop
        ends, odd = _scan(buf, start, stop)
        if not odd:
            return _batch(view, ends, start, stop, 0, len(ends)), Lines(buf, first, start, ends)
        values: list[Entry] = []
        blank = False
        a = 0
        for i in (*odd, len(ends)):
            if i > a:
                values += _batch(view, ends, start, stop, a, i)
            if i < len(ends):
                s = ends[i - 1] + 1 if i else start
                if ends[i] > s:
                    values.append(_one(view[s : ends[i]]))
                else:
                    blank = True
            a = i + 1
        if not blank:
            return values, Lines(buf, first, start, ends)
        spans = [(ends[i - 1] + 1 if i else start, end) for i, end in enumerate(ends)]
        spans = [(s, e) for s, e in spans if e > s]
        return values, Lines(buf, first, [s for s, _ in spans], [e for _, e in spans])

    def discard(self, blocks: Iterator[Block], skip_to: str) -> int | None:
        """Read up to the first line of uuid ``skip_to`` keeping nothing but what is
        collected over the whole file; the file offset of that line (None: absent),
        whose number is then ``self.lines``."""
        metadata = self.metadata
        checkpoints = self.checkpoints
        metadata_kinds = METADATA_KINDS
        for block in blocks:
            values, lines = self.decode(block, self.lines)
            self.lines += len(values)
            for index, e in enumerate(values, lines.first):
                kind = e.type
                if kind in metadata_kinds:
                    metadata[kind] = lines.line(index)
                    continue
                if kind == ATTRIBUTION_SNAPSHOT:
                    self.attribution = lines.line(index)
                    continue
                uuid = e.uuid
                if not uuid:
                    if e is _SKIPPED:
                        self.skipped += 1
                    continue
                if uuid == skip_to:
                    # the kept part starts here: read again from this line
                    self.lines = index
                    return block.base + lines.span(index)[0]
                self.has_any = True
                if not e.isSidechain:
                    self.has_main = True
                # Before the last boundary: its history is discarded at that
                # boundary anyway; only what is collected above survives.
                if kind == "system" and e.subtype == TURN_DURATION and e.messageCount is not None:
                    checkpoints[uuid] = e.messageCount
                self.discarded = True
        return None

    def keep(self, blocks: Iterator[Block]) -> None:
        add = self.entries.setdefault
        common = _COMMON
        has_any = has_main = False
        last = None
        for block in blocks:
            values, lines = self.decode(block, self.lines)
            self.lines += len(values)
            for index, e in enumerate(values, lines.first):
                # The usual line, a message with a new uuid and nothing special, in
                # one dict operation; any other goes through entry() (a uuid seen
                # before is left in place by setdefault, for entry() to replace).
                if (kind := e.type) in common and e.snipMetadata is None and (uuid := e.uuid) and add(uuid, e) is e:
                    e.index = index
                    e.src = lines
                    # Equal strings made one object: its kind, and the parent that
                    # is the line before, as usual (~140 bytes less per entry, and the
                    # walk's lookups end at an identity test).
                    e.type = common[kind]
                    if e.parentUuid == last:
                        e.parentUuid = last
                    last = uuid
                    has_any = True
                    if not e.isSidechain:
                        has_main = True
                else:
                    self.entry(e, index, lines)
        self.has_any |= has_any
        self.has_main |= has_main

    def entry(self, e: Entry, index: int, lines: Lines) -> None:
        """One kept line, any kind."""
        kind = e.type
        if kind in METADATA_KINDS:
            self.metadata[kind] = lines.line(index)
            return
        if kind == ATTRIBUTION_SNAPSHOT:
            self.attribution = lines.line(index)
            return
        uuid = e.uuid
        if not uuid:
            if e is _SKIPPED:
                self.skipped += 1
            return
        self.has_any = True
        if not e.isSidechain:
            self.has_main = True
        e.index = index
        if kind in TRANSCRIPT_TYPES:
            e.src = lines
        entries = self.entries
        old = entries.pop(uuid, None)
        if old is not None and self.skipping and old.is_compact_boundary:
            self.unsure = True  # the skip may have happened at a boundary that is gone now
        if kind == "system" and e.subtype == TURN_DURATION and e.messageCount is not None:
            self.checkpoints[uuid] = e.messageCount
        if kind == "system" and e.subtype == COMPACT_BOUNDARY:
            cm = e.compactMetadata
            if self.skipping and not e.isSidechain and (cm is None or not cm.preserves):
                if entries:
                    self.discarded = True
                    entries.clear()
                    self.unmap_before(lines, index)
                self.boundaries.clear()
                self.snips.clear()
            self.boundaries.append(uuid)
        if e.snipMetadata is not None:
            self.snips.append(uuid)
        entries[uuid] = e

    def unmap_before(self, lines: Lines, index: int) -> None:
        """Let the pages of the mapping before line ``index`` go: nothing points
        there any more. (Pages of a file mapping are only unmapped: touching them
        again reads them back from the page cache.)"""
        if lines.buf is not self.mapped or not hasattr(mmap, "MADV_DONTNEED"):
            return
        end = lines.span(index)[0] // mmap.PAGESIZE * mmap.PAGESIZE
        if end:
            self.mapped.madvise(mmap.MADV_DONTNEED, 0, end)

    def result(self) -> Loaded:
        return Loaded(
            entries=self.entries,
            boundaries=self.boundaries,
            snips=self.snips,
            metadata=self.metadata,
            checkpoints=self.checkpoints,
            attribution=self.attribution,
            skipped=self.skipped,
            lines=self.lines,
            sidechain_only=self.has_any and not self.has_main,
            discarded=self.discarded,
            unsure=self.discarded and self.unsure,
        )


def last_skip_boundary(path: Path | str) -> str | None:
    """uuid of the last non-sidechain ``compact_boundary`` without preserved
    messages, found by searching the bytes backwards (no parse of the history)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _last_skip_boundary(mm)


def _last_skip_boundary(mm: mmap.mmap, low: int = 0) -> str | None:
    """The same over ``mm``, with the search for the name stopping at offset ``low``."""
    end = len(mm)
    while (hit := mm.rfind(b'"compact_boundary"', low, end)) >= 0:
        start = mm.rfind(b"\n", 0, hit) + 1
        stop = mm.find(b"\n", hit)
        stop = len(mm) if stop < 0 else stop
        try:
            e = _decoder.decode(mm[start:stop])
        except msgspec.DecodeError:
            e = None
        if (e is not None and e.type == "system" and e.subtype == COMPACT_BOUNDARY and e.uuid
                and not e.isSidechain and (e.compactMetadata is None or not e.compactMetadata.preserves)):
            return e.uuid
        end = start
    return None
