"""Rewriting a session's transcripts with their secrets redacted, through the trash.

``sessiond secrets --redact`` replaces each transcript of a session that holds
a secret (the main one and its agents') by a copy whose lines went through
``secrets.redact_line``: every line still valid JSON, every uuid, id and
thinking signature as it was, so the session still resumes. Never in place:
the original stays whole until the trash is emptied, in an entry of its own
(``<stamp>-<session>+redacted``, ``trash.REDACTED_MARK``), and the path always
holds a whole file, the original or its copy.

The steps, under the trash lock and with the writers' locks held (a sessiond
writer in the middle of an append finishes its lines first, and the copy is
made of what they left): each copy is written to a hidden temp file beside
its transcript and synced; the originals are hard-linked into the entry and
its manifest written (``trashed``); then each copy is renamed over its
transcript. Lines a writer that takes no lock appends meanwhile (Claude Code
itself, when the root is ``~/.claude``) land in the original: they are
carried over, redacted, onto the end of the copy until it has caught up, just
before the rename, and once more after it (a writer that opens the path for
each append, as Claude Code does, writes the copy from then on; a line landing
in that instant comes after the first lines written to the copy).
A run killed before the manifest leaves an entry without one, which every
reader of the trash skips; killed after it, the trash holds an extra copy of
files that are still the originals. The caller makes sure no sessiond client
is writing the session (``sessiond secrets`` refuses a live one).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from sessiond.secrets import redact_line
from sessiond.wire.records import TrashEntry

from .appendfile import ensure_dir, fsync_dir, write_all
from .safeopen import DIR_MODE, open_regular
from .trash import (
    REDACTED_MARK,
    _item,
    _jsonl_files,
    _stamp,
    _writers_locked,
    check_transcript_path,
    iso,
    shown,
    trash_lock,
    trash_root,
    write_manifest,
)


class Redacted(msgspec.Struct):
    """What a redaction did: the secrets replaced, in which files, and the
    trash entry holding the originals (None when there was nothing to redact)."""

    session: str
    secrets: int
    files: list[str]
    entry: str | None


CHUNK = 1 << 20


def redact_lines(src: int, write: Callable[[bytes], object], limit: int) -> tuple[int, int]:
    """The lines of the next ``limit`` bytes read from the descriptor ``src``,
    redacted, handed to ``write`` with their newlines, byte for byte where
    nothing was found (blank lines, a last line without a newline included);
    how many secrets, and how many bytes were read. The limit: a file that
    grows while it is read is not chased (what grew is carried over after)."""
    found = 0
    read = 0
    tail = b""
    while read < limit:
        chunk = os.read(src, min(CHUNK, limit - read))
        if not chunk:
            break
        read += len(chunk)
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        for line in lines:
            new, here = redact_line(line)
            found += len(here)
            write(new + b"\n")
    if tail:
        new, here = redact_line(tail)
        found += len(here)
        write(new)
    return found, read


def _copy(path: Path, tmp: Path) -> tuple[int, int]:
    """``path`` redacted into the new file ``tmp`` (0600, synced); how many
    secrets, and how many bytes of ``path`` it holds."""
    src = open_regular(path, os.O_RDONLY)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            done = redact_lines(src, out.write, os.fstat(src).st_size)
            out.flush()
            os.fsync(out.fileno())
        return done
    finally:
        os.close(src)


def _carry_over(original: Path, copied: int, path: Path) -> tuple[int, int]:
    """Lines a writer that takes no lock (Claude Code itself, when the root is
    ``~/.claude``) appended to the original after ``copied`` bytes of it were
    read: redacted onto the end of the copy at ``path``; how many secrets, and
    how many bytes of the original were carried."""
    src = open_regular(original, os.O_RDONLY)
    try:
        size = os.fstat(src).st_size
        if size <= copied:
            return 0, 0
        os.lseek(src, copied, os.SEEK_SET)
        out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            done = redact_lines(src, lambda data: write_all(out, data), size - copied)
            os.fsync(out)
            return done
        finally:
            os.close(out)
    finally:
        os.close(src)


CATCH_UP = 8
"""Rounds of carrying what grew into the copy before it replaces the original."""


def redact_session(root: Path, main: Path, *, now: float | None = None) -> Redacted:
    """Replace the session's transcripts that hold secrets by redacted copies,
    the originals kept in the trash (see the module doc)."""
    root = Path(root)
    sid = main.name[: -len(".jsonl")]
    main = check_transcript_path(root, main, sid)
    now = time.time() if now is None else now
    files = [main, *sorted(_jsonl_files(main.parent / sid))]
    with trash_lock(root), _writers_locked(files):
        if not main.is_file() or main.is_symlink():
            from sessiond.wire.errors import not_found

            raise not_found(f"no transcript of session {sid} at {main}")
        copies: list[tuple[Path, Path, int]] = []
        sizes: dict[Path, int] = {}
        try:
            for path in files:
                tmp = path.with_name(f".{path.name}.{os.getpid()}.redact")
                n, sizes[path] = _copy(path, tmp)
                if n:
                    copies.append((path, tmp, n))
                else:
                    tmp.unlink()
            if not copies:
                return Redacted(session=sid, secrets=0, files=[], entry=None)
            name = f"{_stamp(now)}-{sid}{REDACTED_MARK}"
            entry_dir = trash_root(root) / name
            os.makedirs(entry_dir.parent, DIR_MODE, exist_ok=True)
            os.mkdir(entry_dir, DIR_MODE)
            items = []
            for path, _tmp, _n in copies:
                item = _item(root, path, "file", os.lstat(path).st_size)
                ensure_dir((entry_dir / "files" / item.rel).parent)
                os.link(path, entry_dir / "files" / item.rel, follow_symlinks=False)
                items.append(item)
            for parent in {(entry_dir / "files" / i.rel).parent for i in items}:
                fsync_dir(parent)
            entry = TrashEntry(name=name, session=sid, project=shown(main.parent.name), trashedAt=iso(now),
                               reason="redact", bytes=sum(i.bytes for i in items), items=items, files=len(items),
                               state="trashed")
            write_manifest(entry_dir, entry)
            fsync_dir(entry_dir.parent)
            late = 0
            for path, tmp, _n in copies:
                for _ in range(CATCH_UP):  # what grew since the copy, into it, until nothing more does
                    found, carried = _carry_over(path, sizes[path], tmp)
                    late, sizes[path] = late + found, sizes[path] + carried
                    if not carried:
                        break
                os.replace(tmp, path)
            for parent in {path.parent for path, _tmp, _n in copies}:
                fsync_dir(parent)
            for item, (path, _tmp, _n) in zip(items, copies, strict=True):  # the instant before the replace
                late += _carry_over(entry_dir / "files" / item.rel, sizes[path], path)[0]
        finally:
            for _path, tmp, _n in copies:
                tmp.unlink(missing_ok=True)
        return Redacted(session=sid, secrets=late + sum(n for _p, _t, n in copies), entry=name,
                        files=[shown(p.relative_to(root)) for p, _t, _n in copies])
