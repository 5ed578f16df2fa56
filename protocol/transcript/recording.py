"""Chaining recorded messages (SPEC 3.1): which parent each new message gets.

Pure logic over raw entries; the daemon runs it because it holds the session's
uuid set. ``parentUuid`` is stamped as the FIRST key, as Claude Code writes it,
by prepending to the client's bytes (no re-encode) unless the message already has
a ``parentUuid`` key, in which case it is decoded and rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from .entries import EntryHeader, is_chain_participant, is_compact_boundary
from .reencode import decode_entry, encode_entry
from ..wire.errors import bad_request

_json = msgspec.json.Encoder()


class Chained(msgspec.Struct):
    lines: list[tuple[EntryHeader, bytes]]
    last: str | None
    duplicates: int


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
        head: dict = {"parentUuid": parent}
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


def chain_messages(
    messages: Sequence[tuple[EntryHeader, bytes]],
    known: Callable[[str], bool],
    parent: str | None,
) -> Chained:
    """Stamp parents on the new tail of a message list.

    1. Messages whose uuid is ``known`` are skipped; a LEADING run of known chain
       participants moves the starting parent to the last of them.
    2. Each new chain participant's parent is the previous participant written,
       starting from ``parent``; a ``user`` message carrying
       ``sourceToolAssistantUUID`` hangs off that assistant message instead, so
       parallel tool results all hang off the message holding their tool_use.
       A compaction boundary gets ``parentUuid: null`` and ``logicalParentUuid``.
    3. ``last`` is the uuid of the last chain participant: the next call's hint.
    Entries that are not chain participants (metadata) pass through unchanged.
    """
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
                parent = uuid
            continue
        seen_new = True
        if not participant:
            out.append((header, raw))
            continue
        if uuid is None:
            raise bad_request("a recorded message needs a uuid")
        fresh.add(uuid)
        has_keys = header.parentUuid is not msgspec.UNSET or header.logicalParentUuid is not msgspec.UNSET
        if is_compact_boundary(header):
            line = stamp_parent(raw, None, logical_parent=parent, boundary=True, has_parent_keys=has_keys)
            new_parent: str | None = None
        else:
            source = header.sourceToolAssistantUUID if header.type == "user" else None
            new_parent = source if source else parent
            line = stamp_parent(raw, new_parent, has_parent_keys=has_keys)
        stamped = EntryHeader(
            type=header.type,
            uuid=uuid,
            parentUuid=new_parent,
            logicalParentUuid=parent if is_compact_boundary(header) else msgspec.UNSET,
            isSidechain=header.isSidechain,
            agentId=header.agentId,
            subtype=header.subtype,
            sourceToolAssistantUUID=header.sourceToolAssistantUUID,
        )
        out.append((stamped, line))
        parent = uuid
    return Chained(out, parent, duplicates)
