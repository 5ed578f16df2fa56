"""The tail window of a lite read: titles, tag, last prompt, last write,
message count (SPEC 5).

Why its own module: Claude Code re-appends a session's metadata at EOF (SPEC
3.5) so that the last 64 KB name it; the LAST occurrence of each field wins,
so the tail is walked newest-first, and since Claude Code writes metadata
entries type-first (``{"type":"custom-title",...``) and messages
parentUuid-first, a ``startswith`` tells which lines can hold a tail field:
only those and lines of any other shape are decoded. A field is taken only
from the top level of an entry of the right ``type``, so a tool input that
happens to contain ``"summary"`` or ``"tag"`` never leaks in. (Lines are
found by a one-byte search for the newline, ``memchr``, far cheaper than a
multi-byte ``bytes.find`` over the whole window.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

import msgspec

from .entries import MATERIALIZING_TYPES
from .lite_decode import decode_line


class _Tail(msgspec.Struct):
    type: str | None = None
    customTitle: str | None = None
    aiTitle: str | None = None
    lastPrompt: str | None = None
    tag: str | None = None
    summary: str | None = None


_tail_dec = msgspec.json.Decoder(_Tail)

_TAIL_KINDS: Final = {
    "custom-title": ("custom_title", "customTitle"),
    "ai-title": ("ai_title", "aiTitle"),
    "last-prompt": ("last_prompt", "lastPrompt"),
    "tag": ("tag", "tag"),
    "summary": ("summary", "summary"),
}
# Claude Code (and sessiond's client) write metadata entries type-first and
# transcript messages parentUuid-first; these prefixes let the tail scan skip
# every other line with two C-level ``startswith`` calls instead of a decode.
_TYPE_FIRST: Final = b'{"type":"'
_MESSAGE_FIRST: Final = b'{"parentUuid"'
_WANTED_PREFIXES: Final = tuple(b'{"type":"%s"' % k.encode() for k in _TAIL_KINDS)
_KNOWN_PREFIXES: Final = (_MESSAGE_FIRST, _TYPE_FIRST)


def scan_tail(buf: bytes, start: int, end: int) -> tuple[dict[str, str | None], int]:
    """Newest-first walk over the complete lines of ``buf[start:end]``: the LAST
    value of each tail field (an emptied value, e.g. a removed tag, is None), and
    how many lines were decoded. Lines of unknown shape are decoded too, so a
    writer that orders keys differently is still read, only more slowly."""
    found: dict[str, str | None] = {}
    parsed = 0
    rfind, startswith = buf.rfind, buf.startswith
    pos = end
    while pos > start:
        ls = rfind(b"\n", start, pos) + 1 or start
        if pos > ls and (startswith(_WANTED_PREFIXES, ls) or not startswith(_KNOWN_PREFIXES, ls)):
            e = decode_line(_tail_dec, _Tail, buf[ls:pos])
            if e is not None:
                parsed += 1
                kind = _TAIL_KINDS.get(e.type)
                if kind is not None and kind[0] not in found:
                    found[kind[0]] = getattr(e, kind[1]) or None
                    if len(found) == len(_TAIL_KINDS):
                        break
        pos = ls - 1
    return found, parsed


_BRANCH: Final = re.compile(rb'"gitBranch"\s*:\s*"((?:[^"\\]|\\.)*)"')


def last_branch(buf: bytes, start: int, end: int) -> str | None:
    """The last ``gitBranch`` of ``buf[start:end]`` (the tail window): the
    branch the session ended on, as Claude Code's lite reader and the Agent
    SDK's listing take it (the head's first one only when the tail has none)."""
    at = buf.rfind(b'"gitBranch"', start, end)  # from the end: one C-level search, not a walk of the window
    while at >= 0:
        found = _BRANCH.match(buf, at, end)
        if found is not None:
            try:
                value = msgspec.json.decode(b'"' + found.group(1) + b'"')
            except msgspec.DecodeError:
                value = None
            if isinstance(value, str):
                return value or None
        at = buf.rfind(b'"gitBranch"', start, at)
    return None


_HEAD_TITLE_KINDS: Final = ("custom_title", "ai_title")
_HEAD_TITLE_NEEDLES: Final = (b'"type":"custom-title"', b'"type":"ai-title"')


def head_titles(buf: bytes, end: int) -> dict[str, str | None]:
    """The custom and AI titles of the complete lines of ``buf[:end]`` (the head
    window), the last of each winning: Claude Code's picker falls back to the
    head when the tail names no title. Two C-level ``find`` calls spare the
    walk in the usual head, which holds neither."""
    if all(buf.find(n, 0, end) < 0 for n in _HEAD_TITLE_NEEDLES):
        return {}
    found, _ = scan_tail(buf, 0, end)
    return {k: found[k] for k in _HEAD_TITLE_KINDS if found.get(k)}


# ------------------------------------------------ last write and message count


class _Stamp(msgspec.Struct):
    timestamp: str | None = None


class _Counted(msgspec.Struct):
    type: str | None = None
    subtype: str | None = None
    messageCount: int | None = None
    isSidechain: bool | None = None


_stamp_dec = msgspec.json.Decoder(_Stamp)
_counted_dec = msgspec.json.Decoder(_Counted)
_counted_list_dec = msgspec.json.Decoder(list[_Counted])
_STAMP_KEY: Final = b'"timestamp":"'
_TURN_KEY: Final = b'"subtype":"turn_duration"'
_CANDIDATES: Final = 8
"""Newest lines with the key looked at before giving up (a nested object can
carry the key; a top-level one is almost always on the newest line)."""


def _newest_with(buf: bytes, start: int, end: int, key: bytes, cls: type, dec: msgspec.json.Decoder[Any],
                 ok: Callable[[Any], bool]) -> Any:
    """The newest complete line of ``buf[start:end]`` holding ``key`` whose
    top-level decode passes ``ok`` (found by a C-level ``rfind``, one decode per
    candidate line), or None."""
    pos = end
    for _ in range(_CANDIDATES):
        i = buf.rfind(key, start, pos)
        if i < 0:
            return None
        ls = buf.rfind(b"\n", start, i) + 1 or start
        le = buf.find(b"\n", i, end)
        e = decode_line(dec, cls, buf[ls : end if le < 0 else le])
        if e is not None and ok(e):
            return e
        pos = ls
    return None


def _counted_or_none(line: bytes) -> _Counted | None:
    counted: _Counted | None = decode_line(_counted_dec, _Counted, line)
    return counted


def last_entry_at(buf: bytes, start: int, end: int) -> str | None:
    """When the session was last written to, as its newest entry says (the
    file's mtime also moves for a metadata re-append)."""
    e = _newest_with(buf, start, end, _STAMP_KEY, _Stamp, _stamp_dec, lambda e: isinstance(e.timestamp, str))
    return e.timestamp if e is not None else None


def message_count(buf: bytes, start: int, end: int, whole: bool) -> int | None:
    """Counted when the window is the whole file; else the newest
    ``turn_duration`` entry's ``messageCount`` (Claude Code's own count), or None."""
    if whole:  # the whole file is here (64 KB at most): count
        lines = [line for line in buf[start:end].split(b"\n") if b'"user"' in line or b'"assistant"' in line]
        try:  # one decode for all of them; a bad line sends it back to one per line
            entries = _counted_list_dec.decode(b"[" + b",".join(lines) + b"]")
        except msgspec.DecodeError:
            entries = [e for e in map(_counted_or_none, lines) if e is not None]
        return sum(e.type in MATERIALIZING_TYPES and not e.isSidechain for e in entries)
    e = _newest_with(buf, start, end, _TURN_KEY, _Counted, _counted_dec,
                     lambda e: e.subtype == "turn_duration" and isinstance(e.messageCount, int))
    return e.messageCount if e is not None else None
