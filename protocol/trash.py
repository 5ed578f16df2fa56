"""The trash: where ``rm`` and ``prune`` put sessions, and the only place anything
is ever deleted from (SPEC 9).

Layout under the store root::

    .trash/.lock                              one lifecycle operation at a time
    .trash/<stamp>-<session>/manifest.json    what was moved, from where, when, how big
    .trash/<stamp>-<session>/files/<path>     each item at its path relative to the root

An item is the session's transcript, its ``<id>/`` directory (subagent and
workflow files, meta files) and a ``.torn`` side file. Each item moves with one
``rename`` (same filesystem, atomic), so a reader sees it either here or there.

Why a manifest written before the moves: a process killed in the middle of an
``rm`` or a ``restore`` leaves a manifest whose ``state`` says which operation was
under way and a list saying where every item belongs. ``trash_recovery.recover``
(run by the daemon at start and by the CLI before its own operations) finishes an operation
whose moves all happened and undoes one that was cut short, so nothing is ever
left half-moved. Emptying renames an entry to ``.deleting-<name>`` first, so a
half-deleted entry is never mistaken for a trashed session.

Both the daemon and the CLI (when no daemon runs) call these functions; they
take ``.trash/.lock`` so two of them never interleave their moves.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import stat
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

import msgspec

from .transcript.appendfile import DIR_MODE, FILE_MODE, SETTLE_WAIT, ensure_dir, fsync_dir, write_all
from .transcript.importer import flat_agents
from .transcript.usage import tree_stats
from .transcript.paths import check_inside, check_session_id, is_session_id, projects_dir
from .wire.errors import bad_request, conflict, not_found
from .wire.records import TrashedItem, TrashEntry

TRASH_DIR = ".trash"
MANIFEST = "manifest.json"
DELETING = ".deleting-"
MAX_LOCKED = 64
"""Transcripts of one session whose writers' lock an rm takes while moving them
(the main one first): a session with thousands of agent files must not run the
daemon out of descriptors, and a file moved unlocked loses nothing anyway."""

def trash_root(root: Path) -> Path:
    return Path(root) / TRASH_DIR


# ------------------------------------------------------------------ file system


_RENAME_NOREPLACE = 1
_renameat2 = None


def _load_renameat2():
    global _renameat2
    if _renameat2 is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _renameat2 = fn
        except (OSError, AttributeError):
            _renameat2 = False
    return _renameat2


def rename_noreplace(src: Path, dst: Path) -> None:
    """``rename`` that fails with FileExistsError instead of replacing ``dst``
    (renameat2 RENAME_NOREPLACE; a check first where the kernel lacks it)."""
    fn = _load_renameat2()
    if fn:
        AT_FDCWD = -100
        if fn(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (22, 38):  # EINVAL (filesystem without the flag), ENOSYS
            raise OSError(err, os.strerror(err), str(src), None, str(dst))
    if os.path.lexists(dst):
        raise FileExistsError(17, "File exists", str(dst))
    os.rename(src, dst)


def _jsonl_files(path: Path) -> list[Path]:
    out = []
    for dirpath, _dirs, files in os.walk(path):
        out += [Path(dirpath) / f for f in files if f.endswith(".jsonl")]
    return out


def write_manifest(entry_dir: Path, entry: TrashEntry) -> None:
    """Replace the manifest atomically and durably (temp, fsync, rename, fsync dir)."""
    tmp = entry_dir / f".{MANIFEST}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    try:
        write_all(fd, msgspec.json.format(msgspec.json.encode(entry)) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, entry_dir / MANIFEST)
    fsync_dir(entry_dir)


def read_manifest(entry_dir: Path) -> TrashEntry:
    with open(entry_dir / MANIFEST, "rb") as f:
        return msgspec.json.decode(f.read(), type=TrashEntry)


@contextmanager
def trash_lock(root: Path) -> Iterator[None]:
    """The one lock every lifecycle operation on ``root`` holds."""
    base = trash_root(root)
    ensure_dir(base)
    fd = os.open(base / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def _writers_locked(paths: list[Path]) -> Iterator[None]:
    """Hold the writers' exclusive flock on each transcript while it moves: a
    writer in the middle of an append finishes its whole lines first."""
    with ExitStack() as stack:
        for p in paths:
            try:
                fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            stack.callback(os.close, fd)
            if stat.S_ISREG(os.fstat(fd).st_mode):
                _lock_a_while(fd)
        yield


def _lock_a_while(fd: int) -> None:
    """The exclusive lock, waited for at most ``SETTLE_WAIT``: a writer stopped
    while holding it must not hang every lifecycle operation, and moving a file
    under a writer harms nothing (its descriptor follows the file)."""
    deadline = time.monotonic() + SETTLE_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)
        except OSError:
            return  # no flock on this filesystem: no writer locks either


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def iso(now: float) -> str:
    return datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# ---------------------------------------------------------------------- session


def session_items(root: Path, main: Path) -> list[TrashedItem]:
    """What belongs to the session whose transcript is ``main``: the transcript,
    its ``.torn`` side file and its ``<id>/`` directory, those that exist."""
    root = Path(root)
    sid = main.name[: -len(".jsonl")]
    items = []
    for p in (main, main.with_name(main.name + ".torn"), main.parent / sid):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        rel = str(p.relative_to(root))
        if stat.S_ISREG(st.st_mode):
            items.append(TrashedItem(path=rel, kind="file", bytes=st.st_size))
        elif stat.S_ISDIR(st.st_mode):
            size, count, _ = tree_stats(p)
            items.append(TrashedItem(path=rel, kind="dir", bytes=size, files=count))
        elif p == main:
            raise bad_request(f"{p} is not a regular file")
    for f in flat_agents(main.parent).get(sid, []):  # Claude Code 2.0.x's subagent files beside it
        items.append(TrashedItem(path=str(Path(f.src).relative_to(root)), kind="file", bytes=os.lstat(f.src).st_size))
    return items


def _same_dir(given: Path, projects: Path) -> bool:
    """Whether ``given`` is the projects dir: as spelled (``..`` taken
    lexically), else as both resolve (a link to the root). The text test comes
    first: resolving a path makes one ``lstat`` per component, each as long
    as the path so far."""
    return (os.path.normpath(given) == os.path.normpath(projects)
            or os.path.realpath(given) == os.path.realpath(projects))


def check_transcript_path(root: Path, path: Path, session: str) -> Path:
    """A session's main transcript inside ``root``'s projects dir, or a typed error."""
    check_session_id(session)
    path = Path(path)
    projects = projects_dir(Path(root))
    if (not path.is_absolute() or "\x00" in str(path) or path.name != f"{session}.jsonl"
            or path.parent.name.startswith(".") or not _same_dir(path.parent.parent, projects)):
        raise bad_request(f"{str(path)[:300]} is not the transcript of session {session} in this store")
    path = projects / path.parent.name / path.name  # spelled from the root, however the caller spelled it
    check_inside(root, path)
    return path


def trash_session(root: Path, main: Path, *, reason: str = "rm", now: float | None = None) -> TrashEntry:
    """Move a session into the trash (see the module doc for the order of steps)."""
    root = Path(root)
    sid = main.name[: -len(".jsonl")]
    main = check_transcript_path(root, main, sid)
    now = time.time() if now is None else now
    with trash_lock(root):
        if not main.is_file() or main.is_symlink():
            raise not_found(f"no transcript of session {sid} at {main}")
        items = session_items(root, main)
        name = f"{_stamp(now)}-{sid}"
        entry_dir = trash_root(root) / name
        os.mkdir(entry_dir, DIR_MODE)
        entry = TrashEntry(name=name, session=sid, project=main.parent.name, trashedAt=iso(now), reason=reason,
                           bytes=sum(i.bytes for i in items), items=items, files=sum(i.files for i in items),
                           state="trashing")
        write_manifest(entry_dir, entry)
        fsync_dir(entry_dir.parent)
        dest_parent = entry_dir / "files" / main.parent.relative_to(root)
        ensure_dir(dest_parent)
        locked = [main, *_jsonl_files(main.parent / sid)[:MAX_LOCKED - 1]]
        with _writers_locked(locked):
            for item in items:
                rename_noreplace(root / item.path, entry_dir / "files" / item.path)
        fsync_dir(main.parent)
        fsync_dir(dest_parent)
        entry.state = "trashed"
        write_manifest(entry_dir, entry)
        return entry


def entries(root: Path) -> list[TrashEntry]:
    """Every trashed session, oldest first (entries still being moved included,
    with their state)."""
    base = trash_root(Path(root))
    try:
        names = sorted(n for n in os.listdir(base) if not n.startswith("."))
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        try:
            out.append(read_manifest(base / n))
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            continue
    return out


def trashed_ids(root: Path) -> set[str]:
    """Session ids in the trash, from the entry names alone (no manifest read)."""
    try:
        names = os.listdir(trash_root(Path(root)))
    except FileNotFoundError:
        return set()
    return {n[-36:] for n in names if not n.startswith(".") and len(n) > 37 and is_session_id(n[-36:])}


def restore_session(root: Path, session: str) -> TrashEntry:
    """Put the newest trashed copy of ``session`` back, byte for byte; refuses
    when any of its paths exists again (nothing is overwritten)."""
    root = Path(root)
    session = check_session_id(session)
    with trash_lock(root):
        candidates = [e for e in entries(root) if e.session == session and e.state == "trashed"]
        if not candidates:
            raise not_found(f"session {session} is not in the trash")
        entry = candidates[-1]
        entry_dir = trash_root(root) / entry.name
        for item in entry.items:
            if os.path.lexists(root / item.path):
                raise conflict(f"{root / item.path} exists again; refusing to overwrite it (move it away, then restore)")
        entry.state = "restoring"
        write_manifest(entry_dir, entry)
        moved: list[TrashedItem] = []
        try:
            for item in entry.items:
                ensure_dir((root / item.path).parent)
                rename_noreplace(entry_dir / "files" / item.path, root / item.path)
                moved.append(item)
        except OSError:
            for item in reversed(moved):
                os.rename(root / item.path, entry_dir / "files" / item.path)
            entry.state = "trashed"
            write_manifest(entry_dir, entry)
            raise
        for parent in {(root / i.path).parent for i in entry.items}:
            fsync_dir(parent)
        discard(entry_dir)
        return entry


def discard(entry_dir: Path) -> None:
    """Delete a trash entry: renamed aside first, so a crash half-way through the
    deletion never leaves something that looks like a trashed session."""
    doomed = entry_dir.with_name(DELETING + entry_dir.name)
    os.rename(entry_dir, doomed)
    fsync_dir(entry_dir.parent)
    shutil.rmtree(doomed)


def empty_trash(root: Path, *, older_than: float | None = None, dry_run: bool = False,
                now: float | None = None) -> list[TrashEntry]:
    """Delete trashed sessions (those trashed more than ``older_than`` seconds
    ago, or all); the entries deleted (or, with ``dry_run``, that would be)."""
    root = Path(root)
    now = time.time() if now is None else now
    with trash_lock(root):
        doomed = [e for e in entries(root) if e.state == "trashed"
                  and (older_than is None or now - parse_iso(e.trashedAt) >= older_than)]
        if not dry_run:
            for e in doomed:
                discard(trash_root(root) / e.name)
        return doomed
