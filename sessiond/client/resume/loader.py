"""SPEC 4 steps 1-2: read a transcript into a ``uuid → Entry`` map, cheaply.

This module owns the pass over the file: which lines it keeps, what it collects
over the whole file, and the >5 MB skip. The bytes come from blocks.py (the kept
part of the file is mapped and never copied: an entry points into its block of
lines; history the skip discards goes through ONE reused buffer); chainentry.py
decodes each block into :class:`Entry` values.

What a pass does with the decoded lines:

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
  build the same map. The last such boundary is found first (:func:`_last_skip_boundary`)
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
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec

from sessiond.store.appendfile import settled_size, whole_lines_end
from sessiond.store.entries import COMPACT_BOUNDARY, TRANSCRIPT_TYPES
from sessiond.store.jsonl import CHUNK
from sessiond.store.linecap import MAX_LINE
from sessiond.store.regular import open_regular

from .blocks import Block, Lines, kept_blocks, map_file, mapped_blocks, pread_all, reused_blocks
from .chainentry import SKIPPED, Entry, decode_block, parse_line
from .metadata import METADATA_KINDS

SKIP_THRESHOLD: Final = 5 * 1024 * 1024
"""Files larger than this skip pre-compaction history while reading (SPEC 4 step 1)."""

ATTRIBUTION_SNAPSHOT: Final = "attribution-snapshot"
TURN_DURATION: Final = "turn_duration"


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
    fd = open_regular(path)
    try:
        # The map must never outlive its bytes (SIGBUS): no write that may be
        # rolled back, and nothing after the last newline, which a writer may
        # cut (those bytes are read with pread: blocks.mapped_blocks).
        size, settled = settled_size(fd)
        lines_end = whole_lines_end(fd, size)
        mapped = map_file(fd, lines_end) if settled else None
        if size <= skip_threshold:
            return _pass(fd, mapped, size, False, chunk, None).result()
        # The last boundary may be the last line, unterminated: not in the map.
        tail = (_boundary_in(b"".join(pread_all(fd, size - lines_end, lines_end)))
                if 0 < size - lines_end <= MAX_LINE else None)  # a last line over the cap is no boundary
        if mapped is None:
            # Not mappable (or not settled): the whole search over bytes read.
            skip_to = tail or (_last_skip_boundary(b"".join(pread_all(fd, lines_end, 0))) if lines_end else None)
            return _pass(fd, None, size, True, chunk, skip_to).result()
        skip_to = tail or _last_skip_boundary(mapped, size // 2)
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

    def discard(self, blocks: Iterator[Block], skip_to: str) -> int | None:
        """Read up to the first line of uuid ``skip_to`` keeping nothing but what is
        collected over the whole file; the file offset of that line (None: absent),
        whose number is then ``self.lines``."""
        collect = self.collect
        common = _COMMON
        for block in blocks:
            values, lines = decode_block(block, self.lines)
            self.lines += len(values)
            for index, e in enumerate(values, lines.first):
                # The usual line, a main-chain message, leaves only the flags that
                # collect() would set; set here, without the call, it keeps this
                # loop as fast as when it inlined all of collect() (~40 ns a line).
                if e.type in common and not e.isSidechain and (uuid := e.uuid) and uuid != skip_to:
                    self.has_any = self.has_main = self.discarded = True
                    continue
                uuid = collect(e, index, lines)
                if uuid is None:
                    continue
                if uuid == skip_to:
                    # The kept part starts here: keep() reads this line again (what
                    # collect() filed for it, it files again, to the same values).
                    self.lines = index
                    return block.base + lines.span(index)[0]
                # Before the last boundary: its history is discarded at that
                # boundary anyway; only what collect() filed survives.
                self.discarded = True
        return None

    def keep(self, blocks: Iterator[Block]) -> None:
        add = self.entries.setdefault
        common = _COMMON
        has_any = has_main = False
        last = None
        for block in blocks:
            values, lines = decode_block(block, self.lines)
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

    def collect(self, e: Entry, index: int, lines: Lines) -> str | None:
        """File what is collected over the whole file, also from history the skip
        discards: metadata, the attribution snapshot, skipped lines, the sidechain
        flags, turn_duration checkpoints. The line's uuid when it belongs in the
        map, else None."""
        kind = e.type
        if kind in METADATA_KINDS:
            self.metadata[kind] = lines.line(index)
            return None
        if kind == ATTRIBUTION_SNAPSHOT:
            self.attribution = lines.line(index)
            return None
        uuid = e.uuid
        if not uuid:
            if e is SKIPPED:
                self.skipped += 1
            return None
        self.has_any = True
        if not e.isSidechain:
            self.has_main = True
        if kind == "system" and e.subtype == TURN_DURATION and e.messageCount is not None:
            self.checkpoints[uuid] = e.messageCount
        return uuid

    def entry(self, e: Entry, index: int, lines: Lines) -> None:
        """One kept line, any kind."""
        uuid = self.collect(e, index, lines)
        if uuid is None:
            return
        kind = e.type
        e.index = index
        if kind in TRANSCRIPT_TYPES:
            e.src = lines
        entries = self.entries
        old = entries.pop(uuid, None)
        if old is not None and self.skipping and old.is_compact_boundary:
            self.unsure = True  # the skip may have happened at a boundary that is gone now
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


def _last_skip_boundary(buf: mmap.mmap | bytes, low: int = 0) -> str | None:
    """uuid of the last non-sidechain ``compact_boundary`` without preserved
    messages in ``buf``, found by searching the bytes backwards (no parse of the
    history), the search for the name stopping at offset ``low``."""
    end = len(buf)
    while (hit := buf.rfind(b'"compact_boundary"', low, end)) >= 0:
        start = buf.rfind(b"\n", 0, hit) + 1
        stop = buf.find(b"\n", hit)
        found = _boundary_in(buf[start : len(buf) if stop < 0 else stop])
        if found is not None:
            return found
        end = start
    return None


def _boundary_in(line: bytes) -> str | None:
    """uuid of the line when it is a boundary the skip may start at."""
    if b'"compact_boundary"' not in line:
        return None
    e = parse_line(line)
    if e is None:
        return None
    if (e.type == "system" and e.subtype == COMPACT_BOUNDARY and e.uuid
            and not e.isSidechain and (e.compactMetadata is None or not e.compactMetadata.preserves)):
        return e.uuid
    return None
