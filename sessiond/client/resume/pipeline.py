"""SPEC 4: load a transcript file for resume, offline (no daemon, no sockets).

``load_transcript(path)`` runs the pipeline and returns :class:`Resumed`, whose
msgspec serialisation is exactly the ``sessiond show --json`` object.
``resolve_chain`` stops after step 6 without decoding any message into a dict: what a
parse+chain benchmark should time.

Pipeline: loader (1-2) → relink (3) → chain (4-6: walk, splice) → order (6: API order
inside a response) → deserialize (7-8) with the repairs of repairs.py.

Choices where SPEC is silent:

- ``sessionId``: the file name when it is ``<uuid>.jsonl`` (the store's layout: the file
  is the session, resume adopts it; when entries of another session are newer, the
  leaf is the file's own latest message: chain.py); otherwise (an agent file, a renamed copy) the
  ``sessionId`` of the latest message, else of the latest metadata entry, else null.
- ``chain``/``messages`` hold transcript messages only (user, assistant, system,
  attachment): progress and unknown-type entries with a uuid are walked through, never
  reported.
- ``path``: absolute, not resolved through symlinks.
- ``subagents``: agent ids of ``<dir-of-file>/<sessionId>/subagents/agent-*.jsonl``, of
  ``.../subagents/workflows/<run>/agent-*.jsonl`` and of Claude Code 2.0.x's flat
  ``agent-*.jsonl`` files beside the session whose entries carry its ``sessionId``
  (``agents.session_agent_files``), sorted, ids that are not legal agent ids ignored.
- The >5 MB skip (loader.py) is undone, i.e. the file is read again in full, when step 3
  needed a uuid the map lacks (the skip may have discarded it) or the loader is unsure:
  the result must not depend on the file size.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from sessiond.store.agents import session_agent_files
from sessiond.store.entries import decode_object
from sessiond.store.jsonl import CHUNK
from sessiond.store.paths import check_id, check_session_id, is_session_id
from sessiond.wire.errors import SessiondError

from .chain import Bridge, choose_leaf, recover_parallel_tool_results, walk
from .chainentry import Entry
from .deserialize import Interruption, chain_messages, consistency_delta, deserialize, materialize
from .loader import SKIP_THRESHOLD, Loaded, load_entries
from .metadata import metadata_values
from .order import order_responses
from .relink import Compaction, apply_compaction, apply_snips
from .repairs import Repair


class Resumed(msgspec.Struct):
    """The resumed conversation; field order is the JSON key order of ``show --json``."""

    sessionId: str | None
    path: str
    chain: list[str]
    messages: list[dict[str, Any]]
    interruption: Interruption
    consistencyDelta: int | None
    bridges: list[Bridge]
    cuts: list[Bridge]
    """Missing parents where the conversation starts, as in Claude Code (no entry
    within 5 s to link to); ``show --bridge`` joins them, a named repair."""
    repairs: list[Repair]
    skippedLines: int
    metadata: dict[str, Any]
    subagents: list[str]


class Resolved(msgspec.Struct):
    """Steps 1-6: the chain as entries (progress included), nothing decoded yet."""

    loaded: Loaded
    compaction: Compaction
    chain: list[Entry]
    bridges: list[Bridge]
    cuts: list[Bridge]
    reordered: list[Repair]
    """One ``reordered`` repair per response the order step moved."""


def _resolve(loaded: Loaded, session: str | None, wide: bool = False) -> Resolved:
    entries = loaded.entries
    side = loaded.sidechain_only
    compaction = apply_compaction(entries, loaded.boundaries, sidechain_only=side)
    apply_snips(entries, loaded.snips)
    leaf = choose_leaf(entries, sidechain_only=side, session=session)
    chain, bridges, cuts = walk(entries, leaf, sidechain_only=side, wide=wide)
    chain = recover_parallel_tool_results(entries, chain, sidechain_only=side)
    chain, reordered = order_responses(chain)
    return Resolved(loaded, compaction, chain, bridges, cuts, reordered)


def resolve_chain(
    path: Path | str, *, skip_threshold: float = SKIP_THRESHOLD, chunk: int = CHUNK, wide: bool = False
) -> Resolved:
    """Steps 1-6 over ``path``; a file named ``<uuid>.jsonl`` is that session's
    (the leaf is its own message when another session's entries got in).
    ``wide``: bridge every missing parent (a named repair), not only as Claude
    Code does."""
    stem = Path(path).name.removesuffix(".jsonl")
    session = check_session_id(stem) if is_session_id(stem) else None
    resolved = _resolve(load_entries(path, skip_threshold=skip_threshold, chunk=chunk), session, wide)
    loaded = resolved.loaded
    if loaded.discarded and (loaded.unsure or resolved.compaction.missing):
        resolved = _resolve(load_entries(path, skip_threshold=float("inf"), chunk=chunk), session, wide)
    return resolved


def _consistency(resolved: Resolved, reported: list[Entry]) -> int | None:
    """Step 8, accounting for history a leading compact boundary replaced."""
    if not reported or not reported[0].is_compact_boundary:
        return consistency_delta(reported)
    before = resolved.loaded.checkpoints.get(reported[0].logicalParentUuid or "")
    if before is None:
        return None
    preserved = set(resolved.compaction.preserved)
    positions = [i for i, e in enumerate(reported) if e.uuid in preserved]
    return consistency_delta(
        reported,
        hidden=before + 1 - len(positions),
        preserved=preserved,
        lead=positions[0] if positions else 0,
    )


def _session_id(path: Path, messages: list[dict[str, Any]], metadata: dict[str, bytes]) -> str | None:
    stem = path.name.removesuffix(".jsonl")
    if is_session_id(stem):
        return stem
    for m in reversed(messages):
        if isinstance(m.get("sessionId"), str):
            return m["sessionId"]
    for line in metadata.values():
        sid = (decode_object(line) or {}).get("sessionId")
        if isinstance(sid, str):
            return sid
    return None


def _legal_agent_id(agent: str) -> bool:
    try:
        check_id("agent", agent)
    except SessiondError:
        return False
    return True


def subagent_ids(path: Path | str, session_id: str | None = None) -> list[str]:
    """Agent ids with a transcript under ``<dir-of-path>/<session id>/subagents/``
    or flat beside ``path`` (2.0.x: their entries carry the session's id).

    ``session_id`` defaults to the file name (``<uuid>.jsonl``).
    """
    path = Path(path)
    sid = session_id if session_id is not None else path.name.removesuffix(".jsonl")
    if not is_session_id(sid):
        return []
    return sorted({f.agent for f in session_agent_files(path, sid) if _legal_agent_id(f.agent)})


def load_transcript(
    path: Path | str, *, skip_threshold: float = SKIP_THRESHOLD, chunk: int = CHUNK, wide: bool = False
) -> Resumed:
    """SPEC 4 steps 1-8 over the transcript at ``path`` (``wide``: see resolve_chain)."""
    path = Path(os.path.abspath(path))
    resolved = resolve_chain(path, skip_threshold=skip_threshold, chunk=chunk, wide=wide)
    loaded = resolved.loaded
    reported = chain_messages(resolved.chain)
    repairs = list(resolved.reordered)
    messages, interruption = deserialize(materialize(reported, resolved.compaction.zero_usage, repairs), repairs)
    sid = _session_id(path, messages, loaded.metadata)
    return Resumed(
        sessionId=sid,
        path=str(path),
        chain=[e.uuid for e in reported],  # type: ignore[misc]  # a chain is walked by uuid: each has one
        messages=messages,
        interruption=interruption,
        consistencyDelta=_consistency(resolved, reported),
        bridges=resolved.bridges,
        cuts=resolved.cuts,
        repairs=repairs,
        skippedLines=loaded.skipped,
        metadata=metadata_values(loaded.metadata),
        subagents=subagent_ids(path, sid),
    )
