"""The records some answers carry: import results, trash manifests, disk usage.

Plain Structs, kept apart from the code that computes them (``importer``,
``trash``, ``usage``, which import ctypes, shutil, regexes and the file
helpers): the wire messages name them, and every client, the CLI's quickest
commands included, imports the wire messages. Those modules import them from
here.
"""


import os
from typing import Annotated, Literal

import msgspec

MAX_PATH_CHARS = 4096
"""Characters of any path a request carries (Linux's PATH_MAX is 4096 bytes):
the daemon resolves, splits and compares paths, and none of that may cost it
more than a path's worth of work."""

PathText = Annotated[str, msgspec.Meta(max_length=MAX_PATH_CHARS)]
PathBytes = Annotated[bytes, msgspec.Meta(max_length=MAX_PATH_CHARS)]


def path_text(path: str) -> tuple[str, bytes | None]:
    """A path as a record carries it: itself when it is UTF-8; else its bytes
    shown escaped (``\\xff``) and the bytes themselves, which JSON and msgpack
    strings cannot hold but a file name may, so it comes back byte for byte."""
    try:
        path.encode("utf-8")
        return path, None
    except UnicodeEncodeError:
        raw = os.fsencode(path)
        return raw.decode("utf-8", "backslashreplace"), raw


def path_from(text: str, raw: bytes | None) -> str:
    """The path ``path_text`` made ``(text, raw)`` of (``os`` functions take it)."""
    return os.fsdecode(raw) if raw is not None else text

MAX_IMPORT_FILES = 10_000
"""Files one session's Import may name (its transcript and its subagents' files)."""

# ------------------------------------------------------------------ import


Status = Literal["imported", "grown", "merged", "unchanged", "diverged", "unreadable", "busy"]


class ImportFile(msgspec.Struct):
    """One file of a session to import: where it is now, and its path inside the
    project dir."""

    src: PathText
    """Absolute path of the source file."""
    rel: PathText
    """Its path inside the project dir: ``<id>.jsonl`` or ``<id>/...``."""


class SessionSource(msgspec.Struct):
    """One session to import (``Import``): the project dir it goes into, its id, and
    each of its files (transcript and subagent files)."""

    project: PathText
    """The project dir name, kept as it is."""
    session: str
    files: Annotated[list[ImportFile], msgspec.Meta(max_length=MAX_IMPORT_FILES)]


class FileResult(msgspec.Struct):
    """What an import did with one file: its ``status``, the bytes copied, and the
    error when it could not be read."""

    rel: str
    status: Status
    bytes: int = 0
    """Bytes copied into the store."""
    error: str | None = None


# ------------------------------------------------------------------ trash


State = Literal["trashing", "trashed", "restoring", "restored"]
"""A trash entry's state: ``trashing`` and ``restoring`` while a move is under
way (a crash's recovery finishes or undoes it), ``trashed`` in the trash;
``restored`` only in what a finished restore answers (its entry is gone)."""


class TrashedItem(msgspec.Struct):
    """One file or directory of a trash entry: where it was in the store and what it
    weighs; ``restore`` puts it back there."""

    path: str
    """Where it was, relative to the store root (``projects/<dir>/<id>.jsonl``)."""
    kind: Literal["file", "dir"]
    bytes: int
    files: int = 1
    raw: PathBytes | None = None
    """The path's bytes when they are not UTF-8 (``path`` then shows them escaped)."""

    @property
    def rel(self) -> str:
        """The path relative to the root, as ``os`` functions take it."""
        return path_from(self.path, self.raw)


class TrashEntry(msgspec.Struct):
    """One trashed session: its manifest, as stored and as ``trash --json`` prints it."""

    name: str
    session: str
    project: str
    trashedAt: str
    reason: str
    bytes: int
    items: list[TrashedItem]
    files: int = 0
    state: State = "trashed"
    version: int = 1


# ------------------------------------------------------------------ usage


class SessionUsage(msgspec.Struct):
    """One session's disk use (its transcript and subagent files) and when it was
    last written: a row of ``sessiond du``."""

    sessionId: str
    project: str
    path: str
    bytes: int
    files: int
    lastWrite: str
    mtime: float


class ProjectUsage(msgspec.Struct):
    """One project dir's disk use: bytes, sessions and files."""

    project: str
    bytes: int
    sessions: int
    files: int


class Usage(msgspec.Struct):
    """What ``Usage`` answers (``sessiond du``): the bytes and files of the dirs asked
    for, per project and per session."""

    bytes: int
    files: int
    projects: list[ProjectUsage]
    sessions: list[SessionUsage]
    """Largest first."""
