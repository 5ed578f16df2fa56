"""SPEC 4 step 3: compaction relinks and snip removals, in memory only.

Compaction. Only the LAST compact boundary of the conversation counts (sidechain
boundaries only count in a subagent transcript). Everything physically before it is
pruned from the map except the messages it preserved: the history before a boundary is
replaced by its summary, and pruning it makes a full load build the very map the
>5 MB skip builds (loader.py). Earlier boundaries' preserved messages are stale: the
later boundary summarised them.

The preserved messages are, in order of preference:

- ``compactMetadata.preservedMessages {anchorUuid, uuids}``: the explicit list, in list
  order; uuids missing from the file are left out;
- ``compactMetadata.preservedSegment {headUuid, anchorUuid, tailUuid}``: the walk from
  tail back to head. A walk that does not reach the head (a segment uuid missing) means
  the metadata is wrong; then nothing is relinked, as in Claude Code.

Relinking chains the preserved messages in order, the first one onto the anchor
(``head.parentUuid = anchorUuid``; for a segment that is the only change), re-points
every other child of the anchor to the tail, and zeroes the ``usage`` of preserved
assistant messages (their token counts describe the pre-compaction context). An anchor
missing from the file leaves the preserved messages unlinked (and pruned): the file is
damaged there and the boundary's summary still starts the chain.

Snips. Every entry with ``snipMetadata.removedUuids`` names messages to drop. Each
surviving child of a dropped message is relinked to its nearest surviving ancestor. A
removed uuid that is not in the map is left alone: its children keep pointing at it and
the chain walk bridges the gap (and reports it) instead of cutting the conversation
there (Claude Code makes such a child a root).
"""

from __future__ import annotations

import msgspec

from .chainentry import Entry


class Compaction(msgspec.Struct):
    """What step 3 did with the last compact boundary: its uuid, the preserved
    messages in chain order, those whose ``usage`` is zeroed, and the uuids it needed
    but the file lacks."""

    boundary: str | None = None
    preserved: list[str] = []
    zero_usage: set[str] = set()
    missing: set[str] = set()
    """uuids step 3 needed but the map lacks (the skip path reloads fully on these)."""


def last_boundary(entries: dict[str, Entry], boundaries: list[str], *, sidechain_only: bool) -> Entry | None:
    for uuid in reversed(boundaries):
        e = entries.get(uuid)
        if e is not None and e.is_compact_boundary and (sidechain_only or not e.isSidechain):
            return e
    return None


def preserved_messages(entries: dict[str, Entry], boundary: Entry) -> tuple[list[str], str | None, set[str]]:
    """(preserved uuids in chain order, anchor uuid, uuids that were needed but missing)."""
    cm = boundary.compactMetadata
    if cm is None:
        return [], None, set()
    pm = cm.preservedMessages
    if pm is not None and pm.anchorUuid and pm.uuids:
        missing = {u for u in pm.uuids if u not in entries}
        kept = list(dict.fromkeys(u for u in pm.uuids if u in entries))
        if pm.anchorUuid not in entries:
            return [], None, missing | {pm.anchorUuid}
        return kept, pm.anchorUuid, missing
    seg = cm.preservedSegment
    if seg is None or not (seg.headUuid and seg.anchorUuid and seg.tailUuid):
        return [], None, set()
    walked: list[str] = []
    seen: set[str] = set()
    cur = entries.get(seg.tailUuid)
    if cur is None:
        return [], None, {seg.tailUuid}
    while cur is not None and cur.uuid is not None and cur.uuid not in seen:  # (entries are keyed by their uuid)
        seen.add(cur.uuid)
        walked.append(cur.uuid)
        if cur.uuid == seg.headUuid:
            break
        parent = cur.parentUuid
        cur = entries.get(parent) if parent else None
        if parent and cur is None:
            return [], None, {parent}
    else:
        return [], None, set()  # reached a root or looped before the head
    if seg.anchorUuid not in entries:
        return [], None, {seg.anchorUuid}
    walked.reverse()
    return walked, seg.anchorUuid, set()


def apply_compaction(entries: dict[str, Entry], boundaries: list[str], *, sidechain_only: bool = False) -> Compaction:
    """Prune before the last boundary, relink its preserved messages (mutates ``entries``)."""
    boundary = last_boundary(entries, boundaries, sidechain_only=sidechain_only)
    if boundary is None:
        return Compaction()
    preserved, anchor, missing = preserved_messages(entries, boundary)
    keep = set(preserved)
    doomed = []
    for uuid, e in entries.items():  # file order: stop at the boundary
        if e.index >= boundary.index:
            break
        if uuid not in keep:
            doomed.append(uuid)
    for uuid in doomed:
        del entries[uuid]
    if not preserved or anchor is None:
        return Compaction(boundary.uuid, [], set(), missing)
    head, tail = preserved[0], preserved[-1]
    parent = anchor
    for uuid in preserved:
        entries[uuid].parentUuid = parent
        parent = uuid
    for uuid, e in entries.items():
        if e.parentUuid == anchor and uuid != head:
            e.parentUuid = tail
    zero = {u for u in preserved if entries[u].type == "assistant"}
    return Compaction(boundary.uuid, preserved, zero, missing)


def apply_snips(entries: dict[str, Entry], snips: list[str]) -> set[str]:
    """Drop snip-removed messages and relink their children; returns the dropped uuids."""
    removed: set[str] = set()
    for uuid in snips:
        e = entries.get(uuid)
        if e is not None and e.snipMetadata is not None and e.snipMetadata.removedUuids:
            removed.update(e.snipMetadata.removedUuids)
    dropped: dict[str, str | None] = {}
    for uuid in removed:
        e = entries.pop(uuid, None)
        if e is not None:
            dropped[uuid] = e.parentUuid
    if not dropped:
        return set()

    def survivor(uuid: str) -> str | None:
        seen = set()
        cur: str | None = uuid
        while cur is not None and cur in dropped and cur not in seen:
            seen.add(cur)
            cur = dropped[cur]
        return None if cur in seen else cur

    for e in entries.values():
        if e.parentUuid in dropped:
            e.parentUuid = survivor(e.parentUuid)
    return set(dropped)
