"""The resume loader and chain steps as they were before the batch decode (commit
1001e2a), kept verbatim as the reference the fast paths must agree with: every line
decoded on its own and copied, a plain cycle-guarded walk. The steps that did
not change (relink) are imported, not copied; so is the one retry every reader
takes after a failed decode (``readable_copy``: a BOM, lone surrogate escapes,
bytes that are not UTF-8), a reading rule rather than the loader's speed. Tests only."""

# ruff: noqa
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Final

import msgspec

from sessiond.store.entries import COMPACT_BOUNDARY, REAPPENDED_SET, TRANSCRIPT_TYPES, decode_object, readable_copy
from sessiond.client.resume.chain import _descend, _instant
from sessiond.store.jsonl import CHUNK, iter_line_views

SKIP_THRESHOLD: Final = 5 * 1024 * 1024
"""Files larger than this skip pre-compaction history while reading (SPEC 4 step 1)."""

METADATA_KINDS: Final = REAPPENDED_SET | {"summary", "ai-title"}
"""Entry types whose latest occurrence is reported as session metadata."""

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


class Entry(msgspec.Struct, gc=False, rename={"raw": "~sessiond.raw", "index": "~sessiond.index"}):
    """The chain fields of one uuid-bearing line; everything else stays in ``raw``.

    ``parentUuid`` is mutable on purpose: step 3 relinks in memory. ``raw`` and
    ``index`` (position in the file) are filled by the loader, never from JSON.
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
    raw: bytes = b""
    index: int = 0

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
        masked = readable_copy(line)
        return None if masked is None else parse_line(masked)


def load_entries(
    path: Path | str, *, skip_threshold: float = SKIP_THRESHOLD, chunk: int = CHUNK
) -> Loaded:
    """Steps 1-2 over the file at ``path`` (see the module docstring)."""
    skipping = os.path.getsize(path) > skip_threshold
    # Where the skip will land, found before the pass, so nothing before it is
    # ever kept: peak memory is bound by what the resume keeps, not the file.
    skip_to = last_skip_boundary(path) if skipping else None
    entries: dict[str, Entry] = {}
    boundaries: list[str] = []
    snips: list[str] = []
    metadata: dict[str, bytes] = {}
    checkpoints: dict[str, int] = {}
    attribution: bytes | None = None
    skipped = lines = 0
    has_main = has_any = discarded = unsure = False
    decode = _decoder.decode
    transcript_types = TRANSCRIPT_TYPES
    metadata_kinds = METADATA_KINDS

    for index, view in enumerate(iter_line_views(path, chunk)):
        lines += 1
        try:
            e = decode(view)
        except msgspec.ValidationError:
            e = _lenient(view)  # valid JSON, unexpected shape
            if e is None:  # not an object at all: an array, a number ...
                skipped += 1
                continue
        except msgspec.DecodeError:
            readable = readable_copy(view)
            e = None if readable is None else parse_line(readable)
            if e is None:
                if bytes(view).strip():
                    skipped += 1
                continue
        kind = e.type
        if kind in metadata_kinds:
            metadata[kind] = bytes(view)
            continue
        if kind == ATTRIBUTION_SNAPSHOT:
            attribution = bytes(view)
            continue
        uuid = e.uuid
        if not uuid:
            continue
        has_any = True
        if not e.isSidechain:
            has_main = True
        if skip_to is not None:
            if uuid != skip_to:
                # Before the last boundary: its history is discarded at that
                # boundary anyway; only what is collected above survives.
                if kind == "system" and e.subtype == TURN_DURATION and e.messageCount is not None:
                    checkpoints[uuid] = e.messageCount
                discarded = True
                continue
            skip_to = None
        e.index = index
        if kind in transcript_types:
            e.raw = bytes(view)
        old = entries.pop(uuid, None)
        if old is not None and skipping and old.is_compact_boundary:
            unsure = True  # the skip may have happened at a boundary that is gone now
        if kind == "system" and e.subtype == TURN_DURATION and e.messageCount is not None:
            checkpoints[uuid] = e.messageCount
        if kind == "system" and e.subtype == COMPACT_BOUNDARY:
            cm = e.compactMetadata
            if skipping and not e.isSidechain and (cm is None or not cm.preserves):
                if entries:
                    discarded = True
                    entries.clear()
                boundaries.clear()
                snips.clear()
            boundaries.append(uuid)
        if e.snipMetadata is not None:
            snips.append(uuid)
        entries[uuid] = e

    return Loaded(
        entries=entries,
        boundaries=boundaries,
        snips=snips,
        metadata=metadata,
        checkpoints=checkpoints,
        attribution=attribution,
        skipped=skipped,
        lines=lines,
        sidechain_only=has_any and not has_main,
        discarded=discarded,
        unsure=discarded and unsure,
    )


def last_skip_boundary(path: Path | str) -> str | None:
    """uuid of the last non-sidechain ``compact_boundary`` without preserved
    messages, found by searching the bytes backwards (no parse of the history)."""
    import mmap

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            end = len(mm)
            while (hit := mm.rfind(b'"compact_boundary"', 0, end)) >= 0:
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


# SPEC 4 step 3 (relink.py) did not change: the reference uses it as it is.
from sessiond.client.resume.relink import Compaction, apply_compaction, apply_snips  # noqa: E402


class Bridge(msgspec.Struct):
    at: str
    """uuid of the entry whose parent is missing."""
    missingParent: str


def choose_leaf(entries: dict[str, Entry], *, sidechain_only: bool = False) -> Entry | None:
    """Every timestamp parsed (no C-level max over the strings); the descent
    below the latest entry is chain.py's own (it has tests of its own)."""
    best: Entry | None = None
    best_t = float("-inf")
    types = TRANSCRIPT_TYPES
    for e in entries.values():
        if e.type in types and (sidechain_only or not e.isSidechain):
            t = _instant(e.timestamp)
            if best is None or t >= best_t:
                best, best_t = e, t
    return _descend(entries, best, sidechain_only)


BRIDGE_MS = 5000


def claude_link(entries: dict[str, Entry], at: Entry, seen: set[str]) -> Entry | None:
    """Claude Code's timestamp fallback for a missing (or already walked)
    parent, as plainly as it can be written: of the entries of ``at``'s side
    not walked yet (messages, not a file_snapshot), the one with the latest
    time not after ``at``'s (the first in the file of equals), if it is at most
    5 s older. (Replaces the nearest-earlier-line bridge of 1001e2a: issue 29.)"""
    t = _instant(at.timestamp)
    if t == float("-inf"):
        return None
    best, best_t = None, float("-inf")
    for e in entries.values():
        if e.uuid in seen or e.isSidechain != at.isSidechain or e.type not in TRANSCRIPT_TYPES:
            continue
        if e.type == "system" and e.subtype == "file_snapshot":
            continue
        ti = _instant(e.timestamp)
        if ti == float("-inf") or ti > t:
            continue
        if best is None or ti > best_t:
            best, best_t = e, ti
    return best if best is not None and (t - best_t) * 1000 <= BRIDGE_MS else None


def walk(
    entries: dict[str, Entry], leaf: Entry | None, *, sidechain_only: bool = False
) -> tuple[list[Entry], list[Bridge]]:
    """Chronological chain ending at ``leaf`` and the bridges it took."""
    chain: list[Entry] = []
    bridges: list[Bridge] = []
    seen: set[str] = set()
    cur = leaf
    while cur is not None and cur.uuid not in seen:
        seen.add(cur.uuid)
        chain.append(cur)
        parent = cur.parentUuid
        if not parent:
            break
        nxt = entries.get(parent)
        if nxt is None or nxt.uuid in seen:
            nxt = claude_link(entries, cur, seen)
            if nxt is not None:
                bridges.append(Bridge(at=cur.uuid, missingParent=parent))
        cur = nxt
    chain.reverse()
    bridges.reverse()
    return chain, bridges


class _Block(msgspec.Struct):
    type: str | None = None


class _Content(msgspec.Struct):
    content: list[_Block] | str | None = None


class _ContentProbe(msgspec.Struct):
    message: _Content | None = None


_probe = msgspec.json.Decoder(_ContentProbe)


def has_tool_result(e: Entry) -> bool:
    """Does the entry's message hold a tool_result block? Decodes only block types."""
    if not e.raw:
        return False
    try:
        probe = _probe.decode(e.raw)
    except msgspec.DecodeError:
        return False
    content = probe.message.content if probe.message is not None else None
    return isinstance(content, list) and any(b.type == "tool_result" for b in content)


def _add_attachments(
    parent: Entry, attached: dict[str, list[Entry]], seen: set[str], found: dict[str, Entry]
) -> None:
    todo = [parent]
    while todo:
        for child in attached.get(todo.pop().uuid, ()):
            if child.uuid not in seen and child.uuid not in found:
                found[child.uuid] = child
                todo.append(child)


def recover_parallel_tool_results(
    entries: dict[str, Entry], chain: list[Entry], *, sidechain_only: bool = False
) -> list[Entry]:
    """``chain`` with the off-chain siblings and tool_results of its message.id groups."""
    last_on_chain: dict[str, Entry] = {}
    for e in chain:
        if e.type == "assistant":
            mid = e.msg_id
            if mid:
                last_on_chain[mid] = e
    if not last_on_chain:
        return chain
    seen = {e.uuid for e in chain}
    groups: dict[str, list[Entry]] = defaultdict(list)
    answers: dict[str, list[Entry]] = defaultdict(list)
    attached: dict[str, list[Entry]] = defaultdict(list)
    for e in entries.values():
        if e.isSidechain and not sidechain_only:
            continue
        if e.type == "assistant":
            mid = e.msg_id
            if mid in last_on_chain:
                groups[mid].append(e)
        elif e.type == "user" and e.uuid not in seen:
            if e.parentUuid:
                answers[e.parentUuid].append(e)
            src = e.sourceToolAssistantUUID
            if src and src != e.parentUuid:
                answers[src].append(e)
        elif e.type == "attachment" and e.parentUuid and e.uuid not in seen:
            attached[e.parentUuid].append(e)
    inserts: dict[str, list[Entry]] = {}
    for mid, anchor in last_on_chain.items():
        found: dict[str, Entry] = {}
        for member in groups[mid]:
            if member.uuid not in seen:
                found[member.uuid] = member
            for child in answers.get(member.uuid, ()):
                if child.uuid not in seen and child.uuid not in found and has_tool_result(child):
                    found[child.uuid] = child
                    _add_attachments(child, attached, seen, found)
        if found:
            seen.update(found)
            inserts[anchor.uuid] = sorted(found.values(), key=lambda x: x.index)
    if not inserts:
        return chain
    out: list[Entry] = []
    for e in chain:
        out.append(e)
        extra = inserts.get(e.uuid)
        if extra:
            out.extend(extra)
    return out


def _tools(e: Entry) -> tuple[list, list]:
    """(tool_use ids, tool_result ids) read with the standard library."""
    import json

    try:
        obj = json.loads(bytes(e.raw)) if e.raw else {}
    except ValueError:
        return [], []
    message = obj.get("message") if isinstance(obj, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    uses, results = [], []
    for b in content if isinstance(content, list) else ():
        if isinstance(b, dict) and b.get("type") == "tool_use":
            uses.append(b.get("id") if isinstance(b.get("id"), str) else "")
        elif isinstance(b, dict) and b.get("type") == "tool_result":
            results.append(b.get("tool_use_id") if isinstance(b.get("tool_use_id"), str) else "")
    return uses, results


def api_order(chain: list[Entry]) -> list[Entry]:
    """Issue 16's order, written the slow obvious way (added with it, not from 1001e2a):
    repeatedly take the first entry left; if it is an assistant entry, take with it
    every assistant entry of its response up to the next entry of another response,
    then every later user entry answering one of their tool_uses."""
    rest = list(chain)
    out: list[Entry] = []
    while rest:
        e = rest.pop(0)
        out.append(e)
        if e.type != "assistant":
            continue
        key = e.msg_id or ("uuid", e.uuid)
        members = [e]
        for f in list(rest):
            if f.type == "assistant":
                if (f.msg_id or ("uuid", f.uuid)) != key:
                    break
                members.append(f)
        for f in members[1:]:
            rest.remove(f)
            out.append(f)
        calls = {t for m in members for t in _tools(m)[0]}
        answering = [f for f in rest if f.type == "user" and calls & set(_tools(f)[1])]
        for f in answering:
            rest.remove(f)
            out.append(f)
    return out


class Resolved(msgspec.Struct):
    loaded: Loaded
    compaction: Compaction
    chain: list[Entry]
    bridges: list[Bridge]


def _resolve(loaded: Loaded) -> Resolved:
    entries = loaded.entries
    side = loaded.sidechain_only
    compaction = apply_compaction(entries, loaded.boundaries, sidechain_only=side)
    apply_snips(entries, loaded.snips)
    chain, bridges = walk(entries, choose_leaf(entries, sidechain_only=side), sidechain_only=side)
    chain = recover_parallel_tool_results(entries, chain, sidechain_only=side)
    return Resolved(loaded, compaction, api_order(chain), bridges)


def resolve_chain(path, *, skip_threshold: float = SKIP_THRESHOLD, chunk: int = CHUNK) -> Resolved:
    resolved = _resolve(load_entries(path, skip_threshold=skip_threshold, chunk=chunk))
    loaded = resolved.loaded
    if loaded.discarded and (loaded.unsure or resolved.compaction.missing):
        resolved = _resolve(load_entries(path, skip_threshold=float("inf"), chunk=chunk))
    return resolved
