"""Entry types and the typed header decoder: the few fields routing needs.

The write path never decodes whole entries: ``decode_header`` reads only ``type``,
``uuid``, ``parentUuid``, ``isSidechain``, ``agentId`` and ``subtype`` with a typed
msgspec decoder (which still checks the whole entry is one well-formed JSON object),
and the daemon writes the client's bytes unchanged.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Final

import msgspec

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

from sessiond.wire.core import MAX_UUID
from sessiond.wire.errors import SessiondError, bad_request

from .bom import strip_bom
from .reencode import loads_exact

TRANSCRIPT_TYPES: Final = frozenset({"user", "assistant", "system", "attachment"})
"""Messages that take part in the parent chain."""

MATERIALIZING_TYPES: Final = frozenset({"user", "assistant"})
"""The first of these creates a session's file (SPEC 3.2)."""

REAPPENDED_METADATA: Final = (
    "last-prompt",
    "custom-title",
    "tag",
    "agent-name",
    "agent-color",
    "agent-setting",
    "mode",
    "worktree-state",
    "pr-link",
)
"""Metadata kinds re-appended at EOF (SPEC 3.5), in the order they are written.
Not ai-title: a user's custom title overrides it anyway."""

REAPPENDED_SET: Final = frozenset(REAPPENDED_METADATA)

COMPACT_BOUNDARY: Final = "compact_boundary"


class EntryHeader(msgspec.Struct, frozen=True, gc=False):
    """The routing fields of one transcript line; every other field is skipped.

    Not tracked by the garbage collector (``gc=False``): its fields are strings,
    bools and None, so it can never be part of a cycle, and an append makes one
    per entry."""

    type: str | None = None
    uuid: str | None = None
    parentUuid: str | None | msgspec.UnsetType = msgspec.UNSET
    """UNSET when the key is absent, so recording knows whether it must replace it."""
    logicalParentUuid: str | None | msgspec.UnsetType = msgspec.UNSET
    isSidechain: bool | None = None
    agentId: str | None = None
    subtype: str | None = None
    sourceToolAssistantUUID: str | None = None

    @property
    def sidechain(self) -> bool:
        return bool(self.isSidechain)


_header_decoder = msgspec.json.Decoder(EntryHeader)

_SCANNED_FIELDS: Final = ("type", "uuid", "parentUuid", "logicalParentUuid", "isSidechain", "agentId", "subtype",
                          "sourceToolAssistantUUID")
"""The fields ``_entryscan.c`` reads, in the order it passes them to ``EntryHeader``."""


def _compiled_scan() -> Callable[[list[bytes], type[EntryHeader], object], list[EntryHeader] | None] | None:
    """``_entryscan.scan_headers`` when the install built it (a C compiler and
    Python's headers were there) and it reads this ``EntryHeader``; None
    otherwise, or with ``SESSIOND_ENTRYSCAN=python`` in the environment."""
    if os.environ.get("SESSIOND_ENTRYSCAN") == "python" or EntryHeader.__struct_fields__ != _SCANNED_FIELDS:
        return None
    try:
        from ._entryscan import scan_headers
    except ImportError:
        return None
    return scan_headers


_scan_headers = _compiled_scan()
ENTRY_SCAN: Final = "python" if _scan_headers is None else "compiled"
"""Which header scan appends take (the daemon's start log says it)."""

_SURROGATE_ESCAPES = re.compile(
    rb"\\\\"  # an escaped backslash: what follows it is plain text
    rb"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a valid pair
    rb"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"  # a lone half
)
_REPLACEMENT_ESCAPE: Final = rb"\ufffd"


def _mask(match: re.Match[bytes]) -> bytes:
    text = match.group()
    return _REPLACEMENT_ESCAPE if len(text) == 6 and text[1:2] == b"u" else text


def mask_lone_surrogates(line: bytes | memoryview) -> bytes | None:
    """A same-length copy of ``line`` with every lone surrogate escape
    (``"\\ud83d"``) replaced by ``"\\ufffd"``; None when it holds none.

    JavaScript's JSON.stringify writes such escapes when a string is cut inside
    an emoji (a known Claude Code failure) and JSON.parse reads them, but
    msgspec refuses them when it decodes (or merely skips) a string. Decoders
    retry a line that failed with this copy, so the line is read everywhere,
    while the bytes on disk and on the wire are never changed."""
    data = bytes(line)
    if b"\\ud" not in data and b"\\uD" not in data:
        return None
    masked = _SURROGATE_ESCAPES.sub(_mask, data)
    return None if masked == data else masked


def readable_copy(line: bytes | memoryview) -> bytes | None:
    """A copy of a line that failed to decode which every decoder can read,
    or None when there is nothing to change: a leading BOM removed (a file
    saved on Windows; a line at the start of each file glued by ``cat``), lone
    surrogate escapes masked (``mask_lone_surrogates``), bytes that are not
    UTF-8 read as U+FFFD (what Claude Code, reading the file as UTF-8 text,
    makes of them).

    The ONE retry every reader of transcript lines takes after a DecodeError,
    so a first line with a BOM reads the same in resume, listing, search,
    check, import and follow. Bytes on disk are never changed. Costs nothing
    on the usual path: it runs only after a decode failed."""
    data = bytes(line)
    cut = strip_bom(data)
    out = mask_lone_surrogates(cut) or cut
    try:
        out.decode("utf-8")
    except UnicodeDecodeError:  # read as JavaScript reads the file: each bad sequence as U+FFFD
        out = out.decode("utf-8", "replace").encode()
    return None if out is data else out


def decode_header(line: bytes) -> EntryHeader:
    """Header of one entry, or a ``bad_request`` error naming what is wrong.

    Refuses anything that is not exactly one JSON object on one line in UTF-8,
    and an object nested deeper than the decoder can validate. Lone surrogate
    escapes are accepted (see ``mask_lone_surrogates``).
    """
    if 10 in line or 13 in line:  # b"\n", b"\r": an int test is a plain memchr, ~10x faster
        raise bad_request("entry contains a raw newline")
    try:
        header = _header_decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise bad_request(f"entry has a field of the wrong type: {exc}") from None
    except msgspec.DecodeError as exc:
        masked = mask_lone_surrogates(line)  # a BOM is refused: the daemon writes these bytes mid-file
        if masked is None:
            raise bad_request(f"entry is not one JSON object: {exc}") from None
        header = decode_header(masked)
    except RecursionError:
        raise bad_request("entry is nested too deeply to be checked (about 1,000 levels at most)") from None
    if header.uuid is not None and len(header.uuid) > MAX_UUID:
        raise bad_request(f"entry's uuid is {len(header.uuid)} characters long, over the {MAX_UUID} an entry may have")
    if not line.isascii():  # ASCII is valid UTF-8: only other lines need the full check
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            raise bad_request("entry is not valid UTF-8") from None
    return header


def decode_headers(lines: list[bytes]) -> list[EntryHeader]:
    """``decode_header`` of every line; a batch with one bad entry is refused
    whole, the error naming the entry.

    The compiled scan (``_entryscan.c``, when built) reads a batch of the usual
    kind in one pass over each line, and declines (None) anything it is not
    certain of: that batch, and every batch without it, takes the path below,
    which decides. tests/store/test_entryscan.py holds the two to the same answers.

    The checks are made once over the whole batch (a search for each line
    break, one ASCII test on the joined lines; only lines that are not ASCII are
    then checked for UTF-8) and the decodes in one comprehension: per line,
    Python-level work was most of an append's cost. Only a batch that fails goes
    line by line, to name the bad entry. (A single ``decode_lines`` over the joined
    batch was measured no faster once guarded to accept exactly what the
    per-line decode accepts: it reads a value stream.)
    """
    if _scan_headers is not None:
        scanned = _scan_headers(lines, EntryHeader, msgspec.UNSET)
        if scanned is not None:
            return scanned
    return _decode_headers(lines)


def _decode_headers(lines: list[bytes]) -> list[EntryHeader]:
    """``decode_headers`` without the compiled scan: the path that decides."""
    decode = _header_decoder.decode
    try:
        headers = [decode(line) for line in lines]
    except (msgspec.DecodeError, RecursionError):
        return _decode_each(lines)
    joined = b"".join(lines)
    if 10 in joined or 13 in joined:
        return _decode_each(lines)
    if not joined.isascii():
        for line in lines:  # one line at a time: a str of the whole batch could be 4x its bytes
            if not line.isascii():
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    return _decode_each(lines)
    if max([len(h.uuid) for h in headers if h.uuid is not None], default=0) > MAX_UUID:
        return _decode_each(lines)
    return headers


def _decode_each(lines: list[bytes]) -> list[EntryHeader]:
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(decode_header(line))
        except SessiondError as exc:
            raise bad_request(f"entry {i}: {exc.message}") from None
    return out


def try_header(line: bytes) -> EntryHeader | None:
    """Header of a line read back from disk, or None for a torn/unparseable line."""
    try:
        return _header_decoder.decode(line)
    except msgspec.DecodeError:
        masked = readable_copy(line)
        return None if masked is None else try_header(masked)
    except RecursionError:
        return None


def decode_object(line: bytes | memoryview) -> dict[str, Any] | None:
    """The line as a plain dict when it is exactly one JSON object, else None:
    the slow path readers take for lines whose fields have unexpected types.
    A lone surrogate escape reads as U+FFFD; a number msgspec cannot hold
    (``1e400``) stays as its text (``msgspec.Raw``)."""
    try:
        obj = msgspec.json.decode(line)
    except msgspec.DecodeError:
        masked = readable_copy(line)
        if masked is not None:
            return decode_object(masked)
        try:
            obj = loads_exact(line)
        except (ValueError, RecursionError):
            return None
    except RecursionError:
        return None
    return obj if isinstance(obj, dict) else None


def is_chain_participant(header: EntryHeader) -> bool:
    return header.type in TRANSCRIPT_TYPES


def is_compact_boundary(header: EntryHeader) -> bool:
    return header.type == "system" and header.subtype == COMPACT_BOUNDARY


def entry_time(iso: Any) -> datetime | None:
    """An entry's ISO-8601 ``timestamp`` as an aware datetime (one with no zone
    taken as UTC, as transcripts write it), or None when it is missing or not a
    time: the one reading of an entry's time for listings, views and exports."""
    from datetime import UTC, datetime

    if not iso or not isinstance(iso, str):
        return None
    try:
        when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
