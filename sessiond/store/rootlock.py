"""One writer per store root: the lock file every writer of a root goes through.

Why a lock on the root and not only on the socket: ``<socket>.lock`` makes one
daemon per socket, but two sockets (another ``SESSIOND_SOCKET``, a unit beside a
hand-started daemon) could serve one root, and two daemons appending to the same
files is exactly the interleaving sessiond exists to prevent. So:

- the daemon holds an exclusive ``flock`` on ``ROOT/.sessiond.lock`` for its
  whole life (``take``), taken before it opens anything else in the root; the
  file holds its pid and socket (a ``Holder``) for the message a loser prints;
- a direct writer (the client fallback, lifecycle operations with no daemon)
  holds it shared while it writes (``direct_writer``): it cannot get it while a
  daemon lives, and a daemon starting meanwhile waits for it (``DIRECT_WAIT``)
  rather than start writing under it.

The kernel drops a flock when its holder dies, even by SIGKILL: a stale lock
file is harmless, its contents are only believed while the lock is held. On a
filesystem with no flock at all there are no writer locks either (as in
``appendfile``), and this lock is skipped the same way.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from sessiond.wire.errors import RootHeld

from .safeopen import DIR_MODE, UnsafePath, open_regular

LOCK_NAME = ".sessiond.lock"
DIRECT_WAIT = 10.0
"""How long a starting daemon waits for direct writers (a fallback append, an
``rm`` with no daemon) to finish before it gives up."""
SETTLE = 0.5
"""How long a reader waits for a daemon that just took the lock to write its
pid and socket into it."""

_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL)


class Holder(msgspec.Struct):
    """What the daemon holding a root writes into its lock file."""

    pid: int
    socket: str


def lock_file(root: Path) -> Path:
    return Path(root) / LOCK_NAME


def held_message(root: Path, holder: Holder | None) -> str:
    """The one line naming the daemon that holds ``root``."""
    who = f"pid {holder.pid}, socket {holder.socket}" if holder is not None else "pid ?"
    return f"another sessiond ({who}) is serving the root {root}"


def _open(root: Path) -> int:
    """The lock file, made (and the root with it) when missing; never through a
    symlink, only a regular file (PermissionError naming it otherwise)."""
    try:
        try:
            return open_regular(lock_file(root), os.O_RDWR | os.O_CREAT)
        except FileNotFoundError:  # no root yet (only then a mkdir: none on the daemon's loop thread otherwise)
            os.makedirs(root, DIR_MODE, exist_ok=True)
            return open_regular(lock_file(root), os.O_RDWR | os.O_CREAT)
    except UnsafePath as exc:
        raise PermissionError(exc.strerror) from None


def _holder(fd: int) -> Holder | None:
    """The daemon that holds the lock on ``fd``, read once it has written itself."""
    deadline = time.monotonic() + SETTLE
    while True:
        try:
            return msgspec.json.decode(os.pread(fd, 4096, 0), type=Holder)
        except msgspec.DecodeError:  # just taken, not written yet (or a stale, broken file)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)


def _exclusively_held(fd: int) -> bool:
    """True when a daemon (an exclusive holder) has the lock, False when only
    direct writers (shared holders) do."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def take(root: Path, socket: Path, *, wait: float = DIRECT_WAIT) -> int:
    """The daemon's lock on ``root`` (a descriptor to keep open for its whole
    life), with its pid and ``socket`` written in. ``RootHeld`` naming the
    holder when another daemon has it, or when direct writers keep it past
    ``wait`` seconds."""
    fd = _open(root)
    deadline = time.monotonic() + wait
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            except OSError as exc:
                if exc.errno in _NO_FLOCK:
                    return fd  # no flock here: no writer locks either
                raise
            if _exclusively_held(fd):
                holder = _holder(fd)
                raise RootHeld(held_message(root, holder), holder=holder)
            if time.monotonic() > deadline:
                raise RootHeld(f"direct writers kept the root {root} locked for over {wait:g}s")
            time.sleep(0.02)
        data = msgspec.json.encode(Holder(pid=os.getpid(), socket=str(socket)))
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def direct_writer(root: Path, doing: str = "") -> Iterator[None]:
    """Hold ``root`` shared while writing its files without a daemon; ``RootHeld``
    at once when a daemon holds it (``doing``, e.g. ``"not writing behind it"``,
    ends the message)."""
    fd = _open(root)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            message = held_message(root, holder)
            if doing:
                message += f"; {doing}"
            if holder is not None:
                message += f" (--socket {holder.socket} reaches it)"
            raise RootHeld(message, holder=holder) from None
        except OSError as exc:
            if exc.errno not in _NO_FLOCK:
                raise
        yield
    finally:
        os.close(fd)
