"""SPEC 4 steps 1-2: read a transcript into a ``uuid → Entry`` map, cheaply.

Why it is built this way:

- Every line is decoded with ONE typed msgspec decoder of the few header fields the
  chain needs (:class:`Entry`); msgspec skips everything else without building it. The
  line's bytes are kept on transcript messages so that only the entries that end up in
  the resumed conversation are ever decoded into dicts (deserialize.materialize).
- Lines come from :func:`iter_line_views`: 1 MB chunks read into ONE reused buffer,
  lines handed out as memoryviews that msgspec decodes in place; only kept lines are
  copied. ``jsonl.iter_lines`` copies every chunk and every line, which made it alone
  cost more than the whole budget of a 500 MB/s parse (about 1 GB/s measured against
  about 4 GB/s here). The buffer doubles for a line longer than it, so a huge line
  is not quadratic either.
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
  build the same map. What the skip cannot know is whether step 3 will ask for a uuid
  it discarded, or whether a boundary it skipped at is overwritten later by a line
  reusing its uuid; ``Loaded.discarded``/``unsure`` let resume.py load again without
  the skip in those (malformed-file) cases.
- Duplicate uuids: the last line wins and takes the file position of that last line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import msgspec

from .entries import COMPACT_BOUNDARY, REAPPENDED_SET, TRANSCRIPT_TYPES, decode_object
from .jsonl import CHUNK, iter_line_views

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
        return None


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


_METADATA_FIELDS: Final = {
    "summary": ("summary", "summary"),
    "custom-title": ("customTitle", "customTitle"),
    "ai-title": ("aiTitle", "aiTitle"),
    "tag": ("tag", "tag"),
    "agent-name": ("agentName", "agentName"),
    "agent-color": ("agentColor", "agentColor"),
    "agent-setting": ("agentSetting", "agentSetting"),
    "mode": ("mode", "mode"),
    "worktree-state": ("worktreeState", "worktreeSession"),
    "last-prompt": ("lastPrompt", "lastPrompt"),
}
_PR_LINK_FIELDS: Final = ("prNumber", "prUrl", "prRepository")


def metadata_values(raw: dict[str, bytes]) -> dict[str, Any]:
    """``{"customTitle": ..., "prLink": {...}, ...}`` from the latest line of each kind.

    A kind whose latest entry lacks its value field is left out (no older fallback:
    the latest entry is the current state).
    """
    out: dict[str, Any] = {}
    for kind in sorted(raw, key=_metadata_order):
        try:
            obj = msgspec.json.decode(raw[kind])
        except msgspec.DecodeError:  # pragma: no cover - lines were parsed already
            continue
        if kind == "pr-link":
            link = {k: obj[k] for k in _PR_LINK_FIELDS if k in obj}
            if link:
                out["prLink"] = link
            continue
        key, field = _METADATA_FIELDS[kind]
        if field in obj:
            out[key] = obj[field]
    return out


_ORDER: Final = [*_METADATA_FIELDS, "pr-link"]


def _metadata_order(kind: str) -> int:
    return _ORDER.index(kind) if kind in _ORDER else len(_ORDER)
