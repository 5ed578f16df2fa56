"""The remote stream's format: how transcript files map to NATS JetStream.

Shared by the daemon's mirror (which publishes) and ``sessiond push``/``pull``
(which publish and read back), so it lives in the protocol package. Pure: names,
subjects, headers and byte-range helpers; no connection.

Each transcript file has its own subject::

    <prefix>.<project-key>.<session-id>                       the main transcript
    <prefix>.<project-key>.<session-id>.agent-<a>             subagents/agent-<a>.jsonl
    <prefix>.<project-key>.<session-id>.workflows.<r>.agent-<a>

``project-key`` is 16 hex digits of the sha256 of the project dir name (dir names
run past 200 characters, and a subject token cannot hold every byte a name can).
Each message is an exact byte range of one file, cut at a line end, with headers
naming the project dir, the file relative to it and the range's byte offset, so a
pull can put every range where it was: the copy is byte-identical.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import msgspec

from sessiond.store.appendfile import whole_lines_end
from sessiond.store.paths import PROJECT_RE
from sessiond.store.regular import open_regular

HDR_PROJECT = "Sessiond-Project"
HDR_FILE = "Sessiond-File"
HDR_OFFSET = "Sessiond-Offset"

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_ID = r"[A-Za-z0-9_-]{1,128}"
REL_RE = re.compile(
    rf"(?P<sid>{_UUID})(?:\.jsonl|/subagents/(?:workflows/(?P<run>{_ID})/)?agent-(?P<agent>{_ID})\.jsonl)"
)


OFFSET_RE = re.compile(r"0|[1-9][0-9]{0,17}")
"""A range's offset as the mirror writes it: plain decimal (no sign, no ``_``,
no other digits), short of 2**63."""


def parse_offset(value: str | None) -> int | None:
    """A range's offset from an untrusted ``Sessiond-Offset`` header, or None."""
    return int(value) if value is not None and OFFSET_RE.fullmatch(value) else None


def project_key(project: str) -> str:
    return hashlib.sha256(os.fsencode(project)).hexdigest()[:16]  # a dir name that is not UTF-8 too


class FileRef(msgspec.Struct, frozen=True):
    """Which transcript a path (or a message) is: project dir name, session, and
    the path relative to the project dir."""

    project: str
    session: str
    rel: str

    def subject(self, prefix: str) -> str:
        m = REL_RE.fullmatch(self.rel)
        assert m is not None
        parts = [prefix, project_key(self.project), self.session]
        if m["agent"] is not None:
            if m["run"] is not None:
                parts += ["workflows", m["run"]]
            parts.append(f"agent-{m['agent']}")
        return ".".join(parts)


def parse_ref(project: str | None, rel: str | None) -> FileRef | None:
    """A FileRef from untrusted strings (message headers), or None: nothing that
    could escape the project dir or name a non-transcript is accepted."""
    if not project or not rel or not PROJECT_RE.fullmatch(project):
        return None
    m = REL_RE.fullmatch(rel)
    if m is None:
        return None
    return FileRef(project, m["sid"], rel)


def file_ref(projects: Path, path: Path) -> FileRef | None:
    """The FileRef of a transcript path under ``<root>/projects``, else None."""
    try:
        rel = path.relative_to(projects)
    except ValueError:
        return None
    parts = rel.parts
    if len(parts) < 2:
        return None
    return parse_ref(parts[0], "/".join(parts[1:]))


def session_filters(prefix: str, session: str, key: str = "*") -> list[str]:
    """Subjects of every file of a session (main and agents)."""
    return [f"{prefix}.{key}.{session}", f"{prefix}.{key}.{session}.>"]


def cut_at_line(data: bytes, more_follows: bool) -> bytes:
    """End a range at a line end when one is inside it (a single line longer
    than a message is the only thing split mid-line)."""
    if not more_follows or data.endswith(b"\n"):
        return data
    i = data.rfind(b"\n")
    return data[: i + 1] if i >= 0 else data


def read_range(path: Path, start: int, length: int) -> bytes:
    fd = open_regular(path, os.O_RDONLY | os.O_NOFOLLOW)  # a FIFO swapped in must not block the loop
    try:
        out = []
        while length > 0:
            chunk = os.pread(fd, length, start)
            if not chunk:
                break
            out.append(chunk)
            start += len(chunk)
            length -= len(chunk)
        return b"".join(out)
    finally:
        os.close(fd)


def whole_lines_size(path: Path) -> int:
    """The file's size up to its last newline: a torn tail (a writer that died
    mid-line) is never published; the next append moves it aside."""
    fd = open_regular(path, os.O_RDONLY | os.O_NOFOLLOW)  # a FIFO swapped in must not block the loop
    try:
        return whole_lines_end(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
