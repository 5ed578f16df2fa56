"""Direct append: the exit path when the daemon cannot be reached (SPEC 3.3).

Writes whole lines straight into the transcript files under the same exclusive
``flock`` the daemon's drain takes, so the two interleave whole lines only. It
follows the daemon's rules: routing of sidechains to agent files, uuid dedup
against what the file already holds (read under the lock), and lazy
materialization (a main transcript is not created without a user/assistant
message).

It is a writer of the root like the daemon, so it holds the root's lock
(``sessiond/store/rootlock.py``) shared while it writes: while a daemon serves the
root, on whatever socket, it writes nothing and raises ``RootHeld`` naming that
daemon; a daemon starting meanwhile waits for it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec

from sessiond.store import paths
from sessiond.store.appendfile import append_unlocked, file_lock, tail_lines
from sessiond.store.entries import MATERIALIZING_TYPES, decode_header, try_header
from sessiond.store.jsonl import scan_uuids
from sessiond.store.locations import daemon_holds_lock, default_root
from sessiond.store.rootlock import direct_writer
from sessiond.store.safeopen import StoreRoot
from sessiond.store.spoolfile import CLIENT_SPOOL_BYTES, read_spool, spool_path
from sessiond.store.trash import trashed_ids
from sessiond.wire.errors import SessiondError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .core import Outbox

log = logging.getLogger("sessiond.client")


class FallbackResult(msgspec.Struct):
    """What a direct append (no daemon reachable) did with the entries it was given:
    how many were written, were duplicates, or were not written and why."""

    written: int = 0
    duplicates: int = 0
    dropped: int = 0
    """Entries of a session with no message: by the lazy-materialization rule, no file."""
    undelivered: int = 0
    """Entries not written because a daemon is alive but did not answer: writing
    beside a stalled daemon could put them before entries it still holds."""
    trashed: int = 0
    """Entries of a session that is in the trash: refused as the daemon refuses
    them, so an rm is never undone by a late writer recreating the file."""


def write_outbox(outbox: Outbox, root: Path | None, socket: Path) -> FallbackResult:
    """Write what ``outbox`` holds (not known written) directly into its files,
    when no daemon can be reached on ``socket``: what both clients do when the
    daemon is gone. A daemon that holds the socket's lock but does not answer
    is never written beside (its queue could be reordered): the entries stay in
    the outbox and count as ``undelivered``. The caller runs this off any event
    loop (it reads and writes files)."""
    count = sum(len(b.lines) for b in outbox.unconfirmed + outbox.unsent)
    try:
        alive = daemon_holds_lock(socket)
    except PermissionError as exc:
        # Not our directory or lock: no daemon of ours can run there, so
        # nobody else writes these files; say so loudly and write them here.
        log.error("sessiond: %s; no daemon can serve there: writing %d entries of session %s directly",
                  exc, count, outbox.session)
        alive = False
    if alive:
        log.error("sessiond is alive but did not answer within the timeout: %d entries of session %s NOT DELIVERED "
                  "(writing beside a stalled daemon could reorder its file)", count, outbox.session)
        return FallbackResult(undelivered=count)
    beyond = sorted({name for b in outbox.unconfirmed + outbox.unsent for name in b.fields})
    if beyond:
        log.error("sessiond is unreachable and the direct write does not implement %s: %d entries of session %s "
                  "NOT DELIVERED", ", ".join(beyond), count, outbox.session)
        return FallbackResult(undelivered=count)
    result = FallbackResult()
    for cwd, agent, run, lines in outbox.take_for_fallback():
        try:
            part = direct_append(root or default_root(), cwd, outbox.session, lines, agent=agent, run=run, resend=True)
        except (OSError, SessiondError) as exc:  # a refused path (a FIFO, a symlink out of the root), a failing disk
            log.error("sessiond is unreachable and writing directly failed (%s): %d entries of session %s NOT DELIVERED",
                      exc, len(lines), outbox.session)
            part = FallbackResult(undelivered=len(lines))
        for field in FallbackResult.__struct_fields__:
            setattr(result, field, getattr(result, field) + getattr(part, field))
    return result


def direct_append(
    root: Path,
    cwd: str,
    session_id: str,
    lines: list[bytes],
    *,
    agent: str | None = None,
    run: str | None = None,
    resend: bool = False,
) -> FallbackResult:
    """Write ``lines`` of a session straight into its files. With ``resend`` (the
    lines may have been written by a daemon that died), a line without a uuid is
    skipped when a byte-identical line is already in the last megabyte and no
    line before it here was new, as the daemon does for a resend (what a lost
    daemon wrote of them is a prefix). ``RootHeld`` (nothing written) while a
    daemon serves ``root``."""
    with direct_writer(root, "not writing behind it"):
        return _direct_append(root, cwd, session_id, lines, agent, run, resend)


def _direct_append(root: Path, cwd: str, session_id: str, lines: list[bytes], agent: str | None, run: str | None,
                   resend: bool) -> FallbackResult:
    project = paths.project_dir(root, cwd)
    main = paths.session_file(project, session_id)
    if session_id in trashed_ids(root):
        return FallbackResult(trashed=len(lines))
    by_file: dict[Path, list[tuple[str | None, bool, bytes]]] = {}
    for line in lines:
        header = decode_header(line)
        aid = agent if agent is not None else (header.agentId if header.isSidechain else None)
        path = main if aid is None else paths.agent_file(project, session_id, aid, run)
        by_file.setdefault(path, []).append((header.uuid, header.type in MATERIALIZING_TYPES, line))
    result = FallbackResult()
    spooled: Path | None = None
    with StoreRoot(root) as store:  # as the daemon opens them: inside the root, regular files only
        for path, items in by_file.items():
            if path == main and not _exists(store, path):
                if not any(mat for _, mat, _ in items):
                    result.dropped += len(items)
                    continue
                held = _held_by_a_daemon(store, spool_path(root, session_id), items)
                if held is not None:  # a spool file of ours (none, or one out of the root, is left alone)
                    spooled = spool_path(root, session_id)
                    items = held + items
            _append(store, path, items, resend, result)
    if spooled is not None:
        try:
            os.unlink(spooled)  # its entries are in the transcript now (no daemon runs: it is ours to remove)
        except FileNotFoundError:
            pass
    return result


def _held_by_a_daemon(store: StoreRoot, spooled: Path,
                      items: list[tuple[str | None, bool, bytes]]) -> list[tuple[str | None, bool, bytes]] | None:
    """Entries a daemon that is gone held for this session before its first
    message (its spool file), that ``items`` does not carry again: they go first,
    as that daemon would have written them. None when there is no spool file
    to read (missing, not one, or out of the root)."""
    read = read_spool(store, spooled, CLIENT_SPOOL_BYTES)
    if read is None:
        return None
    lines = {line for _, _, line in items}
    uuids = {u for u, _, _ in items if u is not None}
    out = []
    for line in read[1]:
        header = try_header(line)
        if header is None or line in lines or (header.uuid is not None and header.uuid in uuids):
            continue
        out.append((header.uuid, False, line))
    return out


def _exists(store: StoreRoot, path: Path) -> bool:
    try:
        os.close(store.open(path, os.O_RDONLY))
    except FileNotFoundError:
        return False
    return True


def _append(store: StoreRoot, path: Path, items: list[tuple[str | None, bool, bytes]], resend: bool,
            result: FallbackResult) -> None:
    fd, _ = store.open_append(path)
    try:
        with file_lock(fd):
            size = os.fstat(fd).st_size
            known = scan_uuids(fd) if size else set()
            recent = tail_lines(fd, size) if resend else set()
            out: list[bytes] = []
            for uuid, _, line in items:
                if uuid is not None:
                    if uuid in known:
                        result.duplicates += 1
                        continue
                    known.add(uuid)
                elif not out and line in recent:  # after a new line, nothing here was written (a prefix was)
                    result.duplicates += 1
                    continue
                out.append(line)
            if out:
                append_unlocked(fd, path, b"\n".join(out) + b"\n", root=store)
                result.written += len(out)
    finally:
        os.close(fd)
