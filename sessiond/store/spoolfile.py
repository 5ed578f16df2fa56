"""The on-disk spool of entries held before a session's first message.

A session's file is created only by its first ``user``/``assistant`` message
(SPEC 3.2); what comes before (titles, tags, mode, hook attachments) is held.
So that an acknowledgement means the same for a held entry as for any other
(``written``: in a file; ``durable``: synced), the daemon also appends held
entries to ``<root>/.sessiond-spool/<session-id>.jsonl``: a header line naming
the session's project dir, then the entries exactly as received. The spool
file goes away once the session's transcript holds them durably, or when the
session ends without a message (no transcript, as before). A daemon that starts
finds what a crashed one left and holds it again; the client fallback, writing
a session's first message itself, puts the spooled entries first.

Both sides read this format, so it lives here; the policy is ``sessiond/daemon/spool.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from .paths import check_session_id
from .safeopen import OversizedFile, StoreRoot, read_regular

SPOOL_DIR = ".sessiond-spool"
HEADER_SLACK = 64 * 1024
"""Room for a spool file's header line (its project dir and cwd) beside its entries."""
CLIENT_SPOOL_BYTES = 256 * 1024 * 1024 + HEADER_SLACK
"""The bound of a client that reads a spool without knowing the daemon's
``max_pending_bytes``: the default of what a daemon holds over all sessions."""


class SpoolHeader(msgspec.Struct, forbid_unknown_fields=False):
    """First line of a spool file."""

    spool: int
    """Format version (1)."""
    project: str
    """The session's project dir, relative to the root (``projects/<sanitized>``)."""
    cwd: str


def spool_dir(root: Path) -> Path:
    return root / SPOOL_DIR


def spool_path(root: Path, session_id: str) -> Path:
    return spool_dir(root) / f"{check_session_id(session_id)}.jsonl"


def header_line(root: Path, project: Path, cwd: str) -> bytes:
    return msgspec.json.encode(SpoolHeader(spool=1, project=os.path.relpath(project, root), cwd=cwd))


def is_project_dir(project: str) -> bool:
    """Whether a header's ``project`` names what ``header_line`` writes: one
    dir directly under ``projects/`` (not a hidden one). The session's whole
    transcript is written there, so anything else (the spool dir itself, the
    trash, the root) is not a spool sessiond wrote."""
    parts = project.split("/")
    return len(parts) == 2 and parts[0] == "projects" and parts[1] not in ("", "..") and not parts[1].startswith(".")


def read_spool(store: StoreRoot, path: Path, max_bytes: int) -> tuple[SpoolHeader, list[bytes]] | None:
    """The header and the whole held lines of a spool file; a torn last line
    (never acknowledged as written) is left out. None when the file is not a
    spool (no valid header, or one naming no project dir), not a regular
    file, or reached only through a symlink out of the root (opened through
    ``store`` like every store file).
    ``OversizedFile`` when it holds more than ``max_bytes`` (a session holds
    at most its ``max_pending_bytes``, plus ``HEADER_SLACK``): never read,
    never taken for "no spool"."""
    try:
        data = read_regular(path, max_bytes, store=store)
    except OversizedFile:
        raise
    except OSError:
        return None
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a torn line
    if not lines:
        return None
    try:
        header = msgspec.json.decode(lines[0], type=SpoolHeader)
    except msgspec.DecodeError:
        return None
    if header.spool != 1 or not is_project_dir(header.project):
        return None
    return header, [line for line in lines[1:] if line]
