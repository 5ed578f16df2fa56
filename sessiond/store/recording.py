"""Chaining recorded messages (SPEC 3.1): which parent each new message gets.

Pure logic over raw entries; the daemon runs it because it holds the session's
uuid set. ``parentUuid`` is stamped as the FIRST key, as Claude Code writes it,
by prepending to the client's bytes (no re-encode) unless the message already has
a ``parentUuid`` key, in which case it is decoded and rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from sessiond.wire.errors import bad_request

from .entries import EntryHeader, is_chain_participant, is_compact_boundary, readable_copy
from .reencode import decode_entry, encode_entry

_json = msgspec.json.Encoder()


class Cursor(msgspec.Struct):
    """Where a recorded conversation continues: what the next message hangs off.

    ``tip`` is the cursor of SPEC 3.1 (the conversation's tip); ``previous`` the last
    chain participant written; ``response`` the ``message.id`` of the response the
    tip belongs to, when known. They differ only after the result of an earlier
    call of a parallel response: that result hangs off its call and leaves the tip
    where it is."""

    tip: str | None = None
    previous: str | None = None
    response: str | None = None


class Chained(msgspec.Struct):
    """What ``chain_messages`` made of a Record's messages: the lines to write with
    their parents stamped, the hint for the next Record, the duplicates skipped, and
    where the conversation continues."""

    lines: list[tuple[EntryHeader, bytes]]
    last: str | None
    """The tip: the hint for the next call."""
    duplicates: int
    cursor: Cursor


class _MessageId(msgspec.Struct):
    id: str | None = None


class _Response(msgspec.Struct):
    message: _MessageId | None = None


_response = msgspec.json.Decoder(_Response)


def response_id(raw: bytes) -> str | None:
    """``message.id`` of an assistant entry (None when it has none or is odd)."""
    try:
        message = _response.decode(raw).message
    except msgspec.DecodeError:
        masked = readable_copy(raw)  # a half emoji elsewhere in the entry
        if masked is None:
            return None
        return response_id(masked)
    except RecursionError:
        return None
    return message.id if message is not None else None


def stamp_parent(
    raw: bytes,
    parent: str | None,
    *,
    logical_parent: str | None = None,
    boundary: bool = False,
    has_parent_keys: bool = False,
) -> bytes:
    """``raw`` with ``parentUuid`` (and, at a compaction boundary,
    ``logicalParentUuid``) as its first keys.

    ``has_parent_keys`` comes from the decoded header (so an escaped key name
    cannot slip past): when the entry already carries one of those keys it is
    decoded and rebuilt; otherwise the new keys are prepended to the bytes.
    """
    if has_parent_keys:
        obj = decode_entry(raw)
        obj.pop("parentUuid", None)
        obj.pop("logicalParentUuid", None)
        head: dict[str, Any] = {"parentUuid": parent}
        if boundary:
            head["logicalParentUuid"] = logical_parent
        head.update(obj)
        return encode_entry(head)
    body = raw.strip()
    if body[:1] != b"{":
        raise bad_request("a recorded message must be a JSON object")
    prefix = b'{"parentUuid":' + _json.encode(parent)
    if boundary:
        prefix += b',"logicalParentUuid":' + _json.encode(logical_parent)
    rest = body[1:].lstrip()
    return prefix + (b"}" if rest == b"}" else b"," + rest)


def advance(cursor: Cursor, header: EntryHeader, raw: bytes, pending: list[bytes]) -> str | None:
    """The parent of this chain participant, and ``cursor`` moved past it.

    ``pending`` holds the line of the assistant entry the tip's response was last
    seen in, so its ``message.id`` is decoded only when a link depends on it."""
    uuid = header.uuid
    tip, previous = cursor.tip, cursor.previous
    if is_compact_boundary(header):
        cursor.tip = cursor.previous = uuid
        cursor.response = None
        pending.clear()
        return None
    source = header.sourceToolAssistantUUID if header.type == "user" else None
    if source:
        if source == tip or tip is None:
            cursor.tip = uuid
        cursor.previous = uuid
        return source
    if header.type == "assistant":
        parent = previous
        if tip != previous:  # after a result of an earlier call: same response, or the next one?
            if pending:
                cursor.response = response_id(pending.pop())
            if cursor.response is not None and response_id(raw) == cursor.response:
                parent = tip
        pending[:] = [raw]
    else:
        parent = previous
    cursor.tip = cursor.previous = uuid
    return parent


def chain_messages(
    messages: Sequence[tuple[EntryHeader, bytes]],
    known: Callable[[str], bool],
    parent: str | None,
    cursor: Cursor | None = None,
) -> Chained:
    """Stamp parents on the new tail of a message list: the links Claude Code writes.

    1. Messages whose uuid is ``known`` are skipped; a LEADING run of known chain
       participants moves the cursor as if they were new.
    2. A ``user`` message carrying ``sourceToolAssistantUUID`` (a tool result) hangs
       off that assistant message, and becomes the tip only if that message is
       the tip. A later block of the response in flight (an ``assistant`` entry
       sharing the tip's ``message.id``) hangs off the tip: so a response's blocks
       form one branch whatever order its tools finished in. Every other message
       hangs off the previous participant (the next response off the last result
       written, as Claude Code writes it; where nothing is out of order, that is
       the tip). A compaction boundary gets ``parentUuid: null`` and
       ``logicalParentUuid`` = the previous participant.
    3. ``last`` is the tip at the end, the hint for the next call; ``cursor`` the
       whole state, which the daemon keeps per file and continues from when the
       next call's hint is that tip (``cursor`` here), else it starts at ``parent``.
    Entries that are not chain participants (metadata) pass through unchanged.
    """
    if cursor is None or cursor.tip != parent:
        cursor = Cursor(parent, parent)
    else:
        cursor = Cursor(cursor.tip, cursor.previous, cursor.response)
    pending: list[bytes] = []
    out: list[tuple[EntryHeader, bytes]] = []
    fresh: set[str] = set()
    duplicates = 0
    seen_new = False
    for header, raw in messages:
        participant = is_chain_participant(header)
        uuid = header.uuid
        if uuid is not None and (uuid in fresh or known(uuid)):
            duplicates += 1
            if not seen_new and participant:
                advance(cursor, header, raw, pending)
            continue
        seen_new = True
        if not participant:
            out.append((header, raw))
            continue
        if uuid is None:
            raise bad_request("a recorded message needs a uuid")
        fresh.add(uuid)
        has_keys = header.parentUuid is not msgspec.UNSET or header.logicalParentUuid is not msgspec.UNSET
        previous = cursor.previous
        new_parent = advance(cursor, header, raw, pending)
        boundary = is_compact_boundary(header)
        line = stamp_parent(raw, new_parent, logical_parent=previous, boundary=boundary, has_parent_keys=has_keys)
        stamped = EntryHeader(
            type=header.type,
            uuid=uuid,
            parentUuid=new_parent,
            logicalParentUuid=previous if boundary else msgspec.UNSET,
            isSidechain=header.isSidechain,
            agentId=header.agentId,
            subtype=header.subtype,
            sourceToolAssistantUUID=header.sourceToolAssistantUUID,
        )
        out.append((stamped, line))
    settle(cursor, pending)
    return Chained(out, cursor.tip, duplicates, cursor)


def settle(cursor: Cursor, pending: list[bytes]) -> None:
    """Decode the tip's ``message.id`` still pending, before the line goes away."""
    if pending:
        cursor.response = response_id(pending.pop())
