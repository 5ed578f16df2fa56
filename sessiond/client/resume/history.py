"""The conversation before a compaction: what a resume no longer restores.

Why its own module: resume (SPEC 4 step 3) prunes everything before the last
compact boundary, as Claude Code does, so ``show`` is what the agent
continues. The earlier turns are still in the file, and a person looking
back (``show --history``, ``export``) must be able to read them, marked as
such. Here the file is read in full (never the >5 MB skip, which drops that
part unread) and walked back from the last boundary's ``logicalParentUuid``:
through each earlier boundary to the one before it, each segment walked as
resume walks (Claude Code's 5 s link for a lost parent, parallel tool results
recovered), oldest first. Nothing of it is sent anywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sessiond.store.entries import decode_object

from .chain import recover_parallel_tool_results, walk
from .chainentry import Entry
from .loader import load_entries
from .relink import apply_snips, last_boundary, preserved_messages


def pre_compaction(path: Path | str) -> list[dict[str, Any]]:
    """The messages before the last compaction of the transcript at ``path``,
    oldest first (each boundary that ends a segment included, so a reader sees
    where one compaction was; the messages the last one preserved are left to
    the resumed part, which holds them); [] when it was never compacted."""
    loaded = load_entries(path, skip_threshold=float("inf"))
    entries = loaded.entries
    side = loaded.sidechain_only
    apply_snips(entries, loaded.snips)
    boundary = last_boundary(entries, loaded.boundaries, sidechain_only=side)
    if boundary is None:
        return []
    segments: list[list[Entry]] = []
    kept = set(preserved_messages(entries, boundary)[0])  # relinked after the boundary: resume shows them
    seen: set[str | None] = {boundary.uuid}
    start = entries.get(boundary.logicalParentUuid or "")
    while start is not None and start.uuid not in seen:
        chain, _, _ = walk(entries, start, sidechain_only=side)
        chain = [e for e in chain if e.uuid not in seen]
        if not chain:
            break
        seen.update(e.uuid for e in chain)
        segments.append(recover_parallel_tool_results(entries, chain, sidechain_only=side))
        head = chain[0]
        start = entries.get(head.logicalParentUuid or "") if head.is_compact_boundary else None
    out: list[dict[str, Any]] = []
    for segment in reversed(segments):
        for e in segment:
            if e.type in ("user", "assistant", "system", "attachment") and e.uuid not in kept:
                obj = decode_object(bytes(e.raw))
                if obj is not None:
                    out.append(obj)
    return out
