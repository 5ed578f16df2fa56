"""Opening the store's files without leaving the root, blocking, or writing into a pipe.

Both writers (the daemon and the client's direct-append fallback) open every
transcript, agent file, meta file and ``.torn`` side file through ``StoreRoot``:

- The root is opened once, as a directory fd. A root that is itself a symlink
  (``~/.claude`` pointing elsewhere) is the user's choice and is followed then,
  once; nothing below it may lead out of it: each directory component is opened
  relative to its parent's fd with ``O_NOFOLLOW``, and a symlink met on the way
  is resolved by ``StoreRoot`` itself, followed only while it stays inside the
  root. One planted to lead out, before a session began or swapped in while the
  daemon holds the file open, is refused, not followed. This holds at every
  open, including the writer's reopen of a file renamed or deleted under it, not
  only when a session is created. The final component is never a symlink. The
  cost is one ``openat`` per directory level, paid only when a file is
  (re)opened: the writer keeps its descriptors.
- The final open adds ``O_NONBLOCK`` and the descriptor is ``fstat``'ed: a FIFO,
  socket, device or directory at a transcript path would block ``open(2)`` or
  ``write(2)`` forever (a FIFO with a reader opens fine for writing and swallows
  what is written), so anything but a regular file is refused with
  ``UnsafePath`` before a byte is read or written.

``UnsafePath`` is an ``OSError`` (code ``permission_denied`` on the wire, see
``error_for``), so code that already handles a failed open handles it too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from sessiond.wire.errors import SessiondError, io_error, permission_denied

from .regular import describe
from .regular import open_regular as open_regular_following

FILE_MODE = 0o600
DIR_MODE = 0o700
APPEND_FLAGS = os.O_RDWR | os.O_APPEND  # RDWR: the torn-tail check preads
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_LINKS = 40  # as the kernel's path walk


class UnsafePath(OSError):
    """A path the store refuses to open: outside the root, through a symlink, or
    not a regular file."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EPERM, message)


def error_for(exc: OSError, doing: str) -> SessiondError:
    """The wire error for a failed file operation: ``permission_denied`` for a
    refused path, ``io_error`` naming what failed otherwise."""
    if isinstance(exc, UnsafePath):
        return permission_denied(exc.strerror or str(exc))
    return io_error(f"{doing} failed: {exc.strerror or exc}")


def open_regular(name: str | Path, flags: int, mode: int = FILE_MODE, *, dir_fd: int | None = None,
                 shown: str | Path | None = None) -> int:
    """``open(2)`` that never blocks, never follows a final symlink and returns
    only a descriptor on a regular file (``UnsafePath`` otherwise): for the
    files sessiond writes and owns. Readers of paths a user names, which may
    be symlinks, use ``regular.open_regular``."""
    shown = shown if shown is not None else name
    try:
        fd = os.open(name, flags | _FILE_FLAGS, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(f"{shown} is a symlink; sessiond follows none below its root") from None
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP, errno.ENODEV):  # a FIFO without reader, a socket, a device
            raise UnsafePath(f"{shown} is not a regular file; refusing to open it") from None
        raise
    try:
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePath(f"{shown} is {describe(st.st_mode)}, not a regular file; refusing to use it")
    return fd


class OversizedFile(OSError):
    """A file holds more than its reader's bound (a state file grown, or
    replaced by a huge or sparse one): refused before it is read whole."""

    def __init__(self, shown: str | Path, max_bytes: int) -> None:
        super().__init__(errno.EFBIG, f"{shown} holds more than {max_bytes} bytes, more than sessiond ever writes there")


def read_regular(path: str | Path, max_bytes: int, *, follow: bool = False, store: StoreRoot | None = None,
                 dir_fd: int | None = None, shown: str | Path | None = None) -> bytes:
    """The whole of a small file, read with a bound: opened as ``open_regular``
    (never blocking, a regular file only; ``follow`` lets a final symlink lead
    to one, for a file the user owns such as the config; ``store``: through
    ``StoreRoot.open``, for a path below the root; ``dir_fd``: ``path`` is a
    name in that directory, ``shown`` the path errors name) and refused with
    ``OversizedFile`` past ``max_bytes``, whatever ``fstat`` claims: at most
    ``max_bytes + 1`` bytes are ever read. For the daemon's state files, its
    spool and the config, whose size a file on disk, not sessiond, controls."""
    if store is not None:
        fd = store.open(path, os.O_RDONLY)
    else:
        fd = open_regular_following(path) if follow else open_regular(path, os.O_RDONLY, dir_fd=dir_fd, shown=shown)
    shown = shown if shown is not None else path
    try:
        if os.fstat(fd).st_size > max_bytes:
            raise OversizedFile(shown, max_bytes)
        chunks: list[bytes] = []
        got = 0
        while got <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - got)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            got += len(chunk)
        raise OversizedFile(shown, max_bytes)
    finally:
        os.close(fd)


class StoreRoot:
    """The store root as an open directory, and every open below it."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            os.makedirs(self.path, DIR_MODE, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.real = Path(os.path.realpath(self.path))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> StoreRoot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def parts(self, path: Path | str) -> list[str]:
        """The components of ``path`` below the root (as configured, or as it
        resolves): a path the root does not lexically contain is refused."""
        p = Path(path)
        for base in (self.path, self.real):
            try:
                rel = p.relative_to(base)
            except ValueError:
                continue
            parts = list(rel.parts)
            if parts and ".." not in parts:
                return parts
            break
        raise UnsafePath(f"{path} is not inside the store root {self.path}")

    # ------------------------------------------------------------------ walking

    def _walk(self, path: Path | str, names: list[str], create: bool, syncs: DirSyncs | None = None) -> int:
        """A new descriptor on the directory ``names`` below the root, every
        level opened relative to its parent with O_NOFOLLOW. A symlink met on
        the way is resolved here, not by the kernel, and only while it stays
        inside the root (a project directory linked to another one in the
        store is fine; one leading out of it is refused). Missing levels are
        made 0700 when ``create`` (each new entry synced in its parent, now or
        by ``syncs``)."""
        todo = list(names)
        done: list[str] = []  # the levels walked so far, symlinks resolved
        links = 0
        cur = os.dup(self.fd)
        try:
            while todo:
                name = todo.pop(0)
                if name in ("", "."):
                    continue
                if name == "..":
                    if not done:
                        raise UnsafePath(f"{path} leads outside the store root {self.path}")
                    done.pop()
                    os.close(cur)
                    cur = self._walk(path, done, False)  # no symlink left in ``done``
                    continue
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=cur)
                except FileNotFoundError:
                    if not create:
                        raise
                    nxt = self._make_dir(cur, name, syncs)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    target = self._link_target(cur, name, path)
                    links += 1
                    if links > MAX_LINKS:
                        raise UnsafePath(f"{path}: too many symlinks on the way") from None
                    if os.path.isabs(target):
                        todo[:0] = self._inside(target, path)
                        done = []
                        os.close(cur)
                        cur = os.dup(self.fd)
                    else:
                        todo[:0] = target.split("/")
                    continue
                os.close(cur)
                cur = nxt
                done.append(name)
        except BaseException:
            os.close(cur)
            raise
        return cur

    def _inside(self, target: str, path: Path | str) -> list[str]:
        """An absolute symlink target's levels below the root; refused when it
        does not lie inside it."""
        for base in (self.path, self.real):
            try:
                return list(Path(target).relative_to(base).parts)
            except ValueError:
                continue
        raise UnsafePath(f"{path}: a symlink on the way points outside the store root ({target}); "
                         "sessiond never follows one out of it")

    @staticmethod
    def _link_target(parent: int, name: str, path: Path | str) -> str:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            st = None
        if st is None or not stat.S_ISLNK(st.st_mode):
            what = "not a directory" if st is None else "a regular file" if stat.S_ISREG(st.st_mode) else describe(st.st_mode)
            raise UnsafePath(f"{path}: its component {name!r} is {what}") from None
        return os.readlink(name, dir_fd=parent)

    @staticmethod
    def _make_dir(parent: int, name: str, syncs: DirSyncs | None) -> int:
        try:
            os.mkdir(name, DIR_MODE, dir_fd=parent)
            made = True
        except FileExistsError:
            made = False
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        if made:
            try:
                os.fchmod(fd, DIR_MODE)  # whatever the umask
                _sync_entry(parent, syncs)
            except BaseException:
                os.close(fd)
                raise
        return fd

    # ------------------------------------------------------------------ opening

    def open_dir(self, path: Path | str, *, create: bool = False) -> int:
        """A descriptor on a directory below (or at) the root."""
        p = Path(path)
        if p in (self.path, self.real):
            return os.dup(self.fd)
        return self._walk(path, self.parts(path), create)

    def open(self, path: Path | str, flags: int, mode: int = FILE_MODE, *, create_dirs: bool = False) -> int:
        """``open_regular`` of ``path`` below the root (FileNotFoundError when a
        directory is missing and ``create_dirs`` is False)."""
        names = self.parts(path)
        parent = self._walk(path, names[:-1], create_dirs)
        try:
            return open_regular(names[-1], flags, mode, dir_fd=parent, shown=path)
        finally:
            os.close(parent)

    def open_append(self, path: Path | str, syncs: DirSyncs | None = None) -> tuple[int, bool]:
        """An O_APPEND descriptor on ``path`` (created 0600 with its directories);
        and whether this call created the file. Each entry it made is synced in
        its directory before it returns, or, given ``syncs``, by its ``sync()``
        (the caller's to call before anything is written there). Blocks on the
        disk when it creates: run it off a loop."""
        names = self.parts(path)
        parent = self._walk(path, names[:-1], True, syncs)
        try:
            try:
                return open_regular(names[-1], APPEND_FLAGS, dir_fd=parent, shown=path), False
            except FileNotFoundError:
                pass
            try:
                fd = open_regular(names[-1], APPEND_FLAGS | os.O_CREAT | os.O_EXCL, FILE_MODE, dir_fd=parent, shown=path)
            except FileExistsError:
                return open_regular(names[-1], APPEND_FLAGS, dir_fd=parent, shown=path), False
            try:
                os.fchmod(fd, FILE_MODE)
                _sync_entry(parent, syncs)
            except BaseException:
                os.close(fd)
                raise
            return fd, True
        finally:
            os.close(parent)

    def sync_levels(self, path: Path | str, syncs: DirSyncs) -> None:
        """Have ``syncs`` sync every directory from the root down to ``path``'s
        own: each one's entry for the next level, and the last one's for the
        file. For a file whose creation was not known to be synced (a sync of
        its batch failed): whatever that batch made on its way is synced again
        before the file is written."""
        names = self.parts(path)
        for depth in range(len(names)):
            fd = self._walk(path, names[:depth], False)
            try:
                syncs.add(fd)
            finally:
                os.close(fd)

    def check(self, path: Path | str) -> None:
        """Refuse now what an open of ``path`` would refuse (a symlink on the
        way, or something not a regular file there), without creating anything:
        a session gets its ``permission_denied`` at its first request."""
        names = self.parts(path)
        try:
            parent = self._walk(path, names[:-1], False)
        except FileNotFoundError:
            return
        try:
            st = os.stat(names[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        finally:
            os.close(parent)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(f"{path} is a symlink; sessiond follows none below its root")
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{path} is {describe(st.st_mode)}, not a regular file; refusing to use it")

    def write_atomic(self, path: Path | str, data: bytes) -> None:
        """Replace a small file whole: a fresh temp file in the same directory,
        synced, then renamed over it (both relative to the directory's fd, so
        neither can be redirected). Blocks on the disk: run it off a loop."""
        names = self.parts(path)
        parent = self._walk(path, names[:-1], True)
        try:
            tmp = f".{names[-1]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
            fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE, dir_fd=parent)
            try:
                os.fchmod(fd, FILE_MODE)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                os.unlink(tmp, dir_fd=parent)
                raise
            os.close(fd)
            os.replace(tmp, names[-1], src_dir_fd=parent, dst_dir_fd=parent)
            os.fsync(parent)
        finally:
            os.close(parent)


class DirSyncs:
    """New directory entries whose fsync is put off, so that each directory is
    synced once however many entries were made in it.

    A burst of new sessions (agents started together, a turn's parallel
    subagents in one ``subagents/`` directory) made each file and directory
    wait for an fsync of its parent before the next one began: one journal
    commit per entry, in a row. Given to ``StoreRoot.open_append`` for each of
    a batch, it holds the directories instead; ``sync()`` then fsyncs each
    once, after all the entries exist, so they go to disk together. Nothing may
    be written into (or acknowledged of) a file before the ``sync()`` that
    covers its entries. A failed fsync is kept in ``error`` (the first one),
    never raised: the entries of one path may hang on a directory another path
    of the batch made, so the caller fails the whole batch. Holds at most
    ``limit`` descriptors; one more directory first syncs those held, and one
    that cannot be held is synced at once.
    """

    def __init__(self, limit: int = 32) -> None:
        self.limit = limit
        self.error: OSError | None = None
        """The first fsync that failed, if one did."""
        self._held: dict[tuple[int, int], int] = {}

    def add(self, dir_fd: int) -> None:
        """An entry was just made in the directory ``dir_fd`` (borrowed: a
        duplicate is held, or the directory is synced now)."""
        st = os.fstat(dir_fd)
        key = (st.st_dev, st.st_ino)
        if key in self._held:
            return
        if len(self._held) >= self.limit:
            self.sync()
        try:
            self._held[key] = os.dup(dir_fd)
        except OSError:  # no descriptor to spare: as without deferral
            self._fsync(dir_fd)

    def sync(self) -> None:
        """fsync every directory held, once each, and let go of them."""
        held, self._held = self._held, {}
        for fd in held.values():
            try:
                self._fsync(fd)
            finally:
                os.close(fd)

    def _fsync(self, fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            if self.error is None:
                self.error = exc


def _sync_entry(dir_fd: int, syncs: DirSyncs | None) -> None:
    """An entry was made in ``dir_fd``: sync it now, or leave it to ``syncs``."""
    if syncs is None:
        os.fsync(dir_fd)
    else:
        syncs.add(dir_fd)
