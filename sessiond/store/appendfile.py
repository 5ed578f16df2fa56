"""Appending whole lines to a transcript, safely beside any other writer.

The daemon's drain and the client's direct-append fallback both go through
``locked_append``: an exclusive ``flock`` on an ``O_APPEND`` descriptor, then, if
the file ends in a torn line (a writer died mid-line), the torn fragment is moved
to ``<file>.torn`` (appended there with its offset, and synced) and the file is cut
back to its last newline, so a torn line can never swallow a good one and no byte
is silently discarded. Writes are at most 100 MB each, retried until every byte is
out; a failed or short write is cut back to where it started. Two writers that
both use this interleave whole lines only.
"""

from __future__ import annotations

import base64
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from .entries import decode_object
from .linecap import MAX_LINE
from .safeopen import APPEND_FLAGS, DIR_MODE, FILE_MODE, StoreRoot, open_regular

MAX_WRITE = 100 * 1024 * 1024


def ensure_dir(path: Path) -> None:
    """Create ``path`` and its missing parents 0700 (whatever the umask), fsyncing
    each new directory's parent so the entry survives a crash."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, DIR_MODE)
        fsync_dir(d.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_append(path: Path) -> tuple[int, bool]:
    """An O_APPEND descriptor on ``path`` (created 0600 with its dirs); and whether
    this call created the file. For files outside a store root (``sessiond
    pull``'s destination is checked by the caller); inside one, use
    ``StoreRoot.open_append``, which also refuses symlinked directories."""
    ensure_dir(path.parent)
    try:
        return open_regular(path, APPEND_FLAGS), False
    except FileNotFoundError:
        pass
    try:
        fd = open_regular(path, APPEND_FLAGS | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return open_regular(path, APPEND_FLAGS), False
    os.fchmod(fd, FILE_MODE)
    fsync_dir(path.parent)
    return fd, True


def ends_torn(fd: int, size: int) -> bool:
    """True when a non-empty file does not end with a newline."""
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def line_start_before(fd: int, size: int, chunk: int = 65536) -> int:
    """Offset just after the last newline before ``size`` (0 when there is none)."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        block = os.pread(fd, end - start, start)
        i = block.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


class TornTail(msgspec.Struct):
    """A fragment moved out of a transcript: where it was and its bytes."""

    offset: int
    length: int
    movedAt: str
    text: str | None = None
    base64: str | None = None


def torn_path(path: Path) -> Path:
    return path.with_name(path.name + ".torn")


def cut_torn_tail(fd: int, path: Path, size: int, root: StoreRoot | None = None) -> TornTail | None:
    """If the file ends inside a line, append that fragment to ``<file>.torn``
    (synced) and truncate the file to its last newline. Caller holds the lock.
    The side file is opened through ``root`` when given (never outside it), and
    in any case only as a regular file, never blocking."""
    if not ends_torn(fd, size):
        return None
    start = line_start_before(fd, size)
    fragment = os.pread(fd, size - start, start)
    if decode_object(fragment) is not None:
        # Only the newline is missing (a writer that never adds one, or one
        # stopped between the line and its newline): complete it, keep it.
        write_all(fd, b"\n")
        return None
    record = TornTail(offset=start, length=len(fragment), movedAt=datetime.now(UTC).isoformat(timespec="milliseconds"))
    try:
        record.text = fragment.decode("utf-8")
    except UnicodeDecodeError:
        record.base64 = base64.b64encode(fragment).decode()
    side = torn_path(path)
    side_flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    tfd = root.open(side, side_flags) if root is not None else open_regular(side, side_flags)
    try:
        write_all(tfd, msgspec.json.encode(record) + b"\n")
        os.fsync(tfd)
    finally:
        os.close(tfd)
    os.ftruncate(fd, start)
    return record


SETTLE_WAIT = 2.0
"""How long a reader waits for a writer's lock before reading without it (a
writer stopped in the middle of an append must not hang a reader)."""


def whole_lines_end(fd: int, size: int) -> int:
    """Where the file's last whole line ends (``size`` unless a torn tail follows)."""
    return line_start_before(fd, size) if ends_torn(fd, size) else size


def entries_end(fd: int, size: int) -> int:
    """Where a transcript's whole entries end: at its end when its last line
    is an entry, with or without a newline (a file written by a tool that
    leaves the last one off is whole), else before the fragment a writer is
    still in the middle of. A fragment over the line cap is no entry: it is
    not read. What every copy of a transcript's lines takes (``import``,
    ``export --format jsonl``)."""
    end = whole_lines_end(fd, size)
    if end < size and size - end <= MAX_LINE and decode_object(os.pread(fd, size - end, end)) is not None:
        return size
    return end


def settled_size(fd: int) -> tuple[int, bool]:
    """The size of a transcript with no write half done, and whether that is
    known: only then may a reader map it.

    A mapping of bytes a file no longer has kills the reader with SIGBUS. Writers
    shrink a file only under their exclusive lock: rolling back a failed write
    (which may have put whole lines out before it failed), and cutting a torn
    tail (readers never map what follows the last newline). Read under a shared
    lock, the size has no bytes of a write that may still be rolled back. A
    writer holding its lock past ``SETTLE_WAIT`` (a huge write on a slow disk, a
    stopped process) gets (size, False): read the file, do not map it.
    """
    deadline = time.monotonic() + SETTLE_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.002)
                continue
            return os.fstat(fd).st_size, False
        except OSError:  # no flock on this filesystem: no writer locks either
            return os.fstat(fd).st_size, True
        try:
            return os.fstat(fd).st_size, True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


def write_all(fd: int, data: bytes | memoryview) -> int:
    """write(2) until every byte is out, at most ``MAX_WRITE`` per call."""
    total = len(data)
    if total <= MAX_WRITE:
        done = os.write(fd, data)
        if done == total:  # nearly always: one call, no view
            return total
    else:
        done = 0
    view = memoryview(data)
    while done < total:
        done += os.write(fd, view[done : done + MAX_WRITE])
    return total


RESEND_WINDOW = 1024 * 1024
"""How far back a resent entry without a uuid is looked for: a writer that died
had written it at most one drain before dying."""


SPLIT_CHUNK = 64 * 1024


def tail_lines(fd: int, size: int | None = None, window: int = RESEND_WINDOW) -> set[bytes]:
    """The lines in the last ``window`` bytes of a file (the first one may be
    cut: whatever the window starts inside). Split ``SPLIT_CHUNK`` bytes at a
    time: one split of a megabyte holds the GIL for a millisecond or two, which
    the daemon's event loop would wait out when this runs in its read pool."""
    if size is None:
        size = os.fstat(fd).st_size
    if not size:
        return set()
    data = os.pread(fd, window, max(0, size - window))
    out: set[bytes] = set()
    pos, end = 0, len(data)
    while True:
        cut = data.find(b"\n", pos + SPLIT_CHUNK) if end - pos > SPLIT_CHUNK else -1
        if cut < 0:
            out.update(data[pos:].split(b"\n"))
            return out
        out.update(data[pos:cut].split(b"\n"))
        pos = cut + 1


class TornTailFound(Exception):
    """Raised by ``append_unlocked`` with ``defer_torn``: the file ends inside a
    line and nothing was written. Cutting it reads the fragment back and syncs
    the side file, so the daemon does that in a worker thread, then appends."""


class Appended(msgspec.Struct):
    """What ``locked_append`` did: the file's size after the write, and the torn
    tail it moved aside first, if there was one."""

    size: int
    """File size after the write."""
    torn: TornTail | None = None
    """A torn tail found (and moved aside) before writing."""


def locked_append(fd: int, path: Path, data: bytes | memoryview, *, blocking: bool = True,
                  known_end: int | None = None, root: StoreRoot | None = None, defer_torn: bool = False) -> Appended | None:
    """Append ``data`` (whole lines) under an exclusive flock; None when
    ``blocking`` is False and another writer holds the lock. ``known_end``: the
    size this caller's last write left the file at (see ``append_unlocked``);
    ``root``: the store the file is in (its torn-tail side file is opened there)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return None
    try:
        return append_unlocked(fd, path, data, known_end=known_end, root=root, defer_torn=defer_torn)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def append_unlocked(fd: int, path: Path, data: bytes | memoryview, *, known_end: int | None = None,
                    root: StoreRoot | None = None, defer_torn: bool = False) -> Appended:
    """The body of ``locked_append`` for a caller already holding the lock.

    The torn-tail check is skipped when the file still ends where the caller's
    own last (whole-lines) write left it: nobody else wrote since. On a failed or
    short write the file is cut back to where it was, so a failure never leaves a
    partial line behind; the error is re-raised. ``defer_torn``: raise
    ``TornTailFound`` instead of cutting a torn tail here.
    """
    size = os.lseek(fd, 0, os.SEEK_END)  # the size (a regular file's end), without building a stat result
    torn = None
    if size != known_end:
        if defer_torn and ends_torn(fd, size):
            raise TornTailFound(path)
        torn = cut_torn_tail(fd, path, size, root)
        size = os.fstat(fd).st_size
    try:
        return Appended(size + write_all(fd, data), torn)
    except OSError:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass
        raise


@contextmanager
def file_lock(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
