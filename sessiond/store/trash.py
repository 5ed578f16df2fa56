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

A manifest is read back as untrusted input: anyone who can write the root can
write one. It is opened like every state file of the daemon (no symlink
followed, nothing but a regular file, ``MAX_MANIFEST_BYTES`` at most) and
checked (``check_entry``: its name, its dates and counts in range, every item
a plain name in one project dir); one that fails is skipped with a warning,
never used. Every move then goes through ``StoreRoot``, so a symlink planted
in the store or in the trash cannot lead a move out of the root either.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import math
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import msgspec

from sessiond.wire.errors import bad_request, conflict, not_found
from sessiond.wire.records import TrashedItem, TrashEntry, path_text

from .appendfile import SETTLE_WAIT, ensure_dir, fsync_dir, write_all
from .importer import FLAT_AGENT, flat_agents
from .paths import agent_file, check_inside, check_session_id, is_session_id, projects_dir
from .safeopen import DIR_MODE, FILE_MODE, StoreRoot, UnsafePath, error_for, open_regular, read_regular
from .usage import tree_stats

log = logging.getLogger("sessiond")

TRASH_DIR = ".trash"
MANIFEST = "manifest.json"
DELETING = ".deleting-"
AGENT_MARK = "~"
"""Names an entry holding one agent transcript of a session, not the session:
``<stamp>-<session>~[<run>~]<agent>``. Such an entry leaves its session where
it is (``trashed_ids`` does not count it)."""
REDACTED_MARK = "+redacted"
"""Ends the name of an entry holding the originals of a session's transcripts
that ``sessiond secrets --redact`` replaced by redacted copies:
``<stamp>-<session>+redacted``. The session stays where it is (``trashed_ids``
does not count it); the entry is listed and emptied like any other, and
``restore`` refuses to put the originals back over the redacted files."""
MAX_LOCKED = 64
"""Transcripts of one session whose writers' lock an rm takes while moving them
(the main one first): a session with thousands of agent files must not run the
daemon out of descriptors, and a file moved unlocked loses nothing anyway."""

MAX_MANIFEST_BYTES = 4 << 20
"""The largest manifest read back. One names a session's few items, or with
Claude Code 2.0.x's flat agent files beside it some thousands (about 150
bytes each); anything larger was not written by sessiond, and a manifest
linked to ``/dev/zero`` or made a sparse gigabyte must not become memory."""
MAX_COUNT = 1 << 53
"""The largest byte or file count a manifest may give (exact as a float,
far beyond any disk)."""


class BadManifest(ValueError):
    """A manifest sessiond would not have written: its entry is skipped."""


def trash_root(root: Path) -> Path:
    return Path(root) / TRASH_DIR


def shown(name: str | os.PathLike[str]) -> str:
    """A file name as a log line or an error message may carry it (bytes that
    are not UTF-8 escaped)."""
    return path_text(os.fspath(name))[0]


def _open_dir(path: Path) -> int:
    """A descriptor on the directory ``path`` itself: a symlink there (or
    anything but a directory) is ``UnsafePath``, never followed or opened."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{shown(path)} is not a directory (a symlink or a file); sessiond follows none") from None
        raise


# ------------------------------------------------------------------ file system


_RENAME_NOREPLACE = 1
_renameat2: Callable[..., int] | Literal[False] | None = None


def _load_renameat2() -> Callable[..., int] | Literal[False]:
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


_AT_FDCWD = -100


def rename_noreplace(src: Path | str, dst: Path | str, *, src_dir_fd: int = _AT_FDCWD,
                     dst_dir_fd: int = _AT_FDCWD) -> None:
    """``rename`` that fails with FileExistsError instead of replacing ``dst``
    (renameat2 RENAME_NOREPLACE; a check first where the kernel lacks it);
    each name relative to its directory's descriptor when given."""
    fn = _load_renameat2()
    if fn:
        if fn(src_dir_fd, os.fsencode(src), dst_dir_fd, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (22, 38):  # EINVAL (filesystem without the flag), ENOSYS
            raise OSError(err, os.strerror(err), shown(src), None, shown(dst))
    fds = {"src_dir_fd": None if src_dir_fd == _AT_FDCWD else src_dir_fd,
           "dst_dir_fd": None if dst_dir_fd == _AT_FDCWD else dst_dir_fd}
    try:
        os.stat(dst, dir_fd=fds["dst_dir_fd"], follow_symlinks=False)
        raise FileExistsError(17, "File exists", shown(dst))
    except FileNotFoundError:
        pass
    os.rename(src, dst, **fds)


def lexists_in(store: StoreRoot, path: Path) -> bool:
    """Whether something is at ``path`` (not followed), its directory reached
    through ``store``: ``UnsafePath`` when the way there leaves the root."""
    try:
        parent = store.open_dir(path.parent)
    except FileNotFoundError:
        return False
    try:
        os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(parent)


def move(store: StoreRoot, src: Path, dst: Path) -> None:
    """``rename_noreplace`` of ``src`` to ``dst`` (its missing directories
    made), both directories opened through ``store``: a symlink on the way of
    either that leads out of the root is ``UnsafePath``, never followed."""
    src_parent = store.open_dir(src.parent)
    try:
        dst_parent = store.open_dir(dst.parent, create=True)
        try:
            rename_noreplace(src.name, dst.name, src_dir_fd=src_parent, dst_dir_fd=dst_parent)
        finally:
            os.close(dst_parent)
    finally:
        os.close(src_parent)


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
    """The checked manifest of the entry ``entry_dir`` (see the module doc):
    ``OSError`` (``UnsafePath`` for a symlink, FIFO, device, directory),
    ``BadManifest`` or a msgspec error when it cannot be used."""
    parent = _open_dir(entry_dir)
    try:
        data = read_regular(MANIFEST, MAX_MANIFEST_BYTES, dir_fd=parent, shown=shown(entry_dir / MANIFEST))
    finally:
        os.close(parent)
    entry = msgspec.json.decode(data, type=TrashEntry)
    check_entry(entry, entry_dir.name)
    return entry


def _count(value: int, what: str) -> None:
    if not 0 <= value <= MAX_COUNT:
        raise BadManifest(f"its {what} {value} is out of range")


def check_entry(entry: TrashEntry, name: str) -> None:
    """Refuse (``BadManifest``) a manifest that does not describe the entry
    ``name`` as ``trash_session`` writes it: the entry's own name and session,
    a date and counts in range, and items that are each one plain name in one
    project dir of the store (``projects/<dir>/<name>``) belonging to the
    session, so no path it gives reaches outside that dir."""
    agent = AGENT_MARK in name
    redacted = name.endswith(REDACTED_MARK)
    suffix = f"-{entry.session}{REDACTED_MARK}" if redacted else "-" + entry.session
    if (entry.name != name or not is_session_id(entry.session)
            or not (f"-{entry.session}{AGENT_MARK}" in name if agent else name.endswith(suffix))):
        raise BadManifest(f"it names entry {shown(entry.name)[:100]!r}, session {shown(entry.session)[:40]!r}")
    try:
        when = parse_iso(entry.trashedAt)
    except (ValueError, OverflowError, OSError):
        raise BadManifest(f"its trashedAt {shown(entry.trashedAt)[:40]!r} is not a date") from None
    if not (math.isfinite(when) and when >= 0):
        raise BadManifest(f"its trashedAt {entry.trashedAt[:40]!r} is out of range")
    _count(entry.bytes, "byte count")
    _count(entry.files, "file count")
    if not entry.items:
        raise BadManifest("it names no item")
    project = None
    for item in entry.items:
        _count(item.bytes, "byte count")
        _count(item.files, "file count")
        parts = item.rel.split("/")
        if (len(parts) < 3 or parts[0] != "projects" or parts[1] in ("", ".", "..") or parts[1].startswith(".")
                or "\x00" in item.rel or (project is not None and parts[1] != project)
                or not (_AGENT_ITEM.fullmatch("/".join(parts[2:])) is not None and parts[2] == entry.session if agent
                        else _redacted_item(parts[2:], entry.session) if redacted
                        else len(parts) == 3 and _belongs(parts[2], entry.session))):
            raise BadManifest(f"its item {shown(item.rel)[:200]!r} is not a file of the session in one project dir")
        project = parts[1]


def _redacted_item(parts: list[str], session: str) -> bool:
    """An item of a ``+redacted`` entry: the session's main transcript or one of its agent transcripts."""
    if len(parts) == 1:
        return parts[0] == f"{session}.jsonl"
    return parts[0] == session and _AGENT_ITEM.fullmatch("/".join(parts)) is not None


_AGENT_ITEM = re.compile(r"[^/]+/subagents/(?:workflows/[A-Za-z0-9_-]{1,128}/)?agent-[A-Za-z0-9_-]{1,128}\.jsonl")
"""The one item of an agent entry, below its project dir."""


def _belongs(name: str, session: str) -> bool:
    """Whether ``name`` is one of the names a session's items have."""
    return name in (f"{session}.jsonl", f"{session}.jsonl.torn", session) or FLAT_AGENT.fullmatch(name) is not None


def _open_trash(root: Path, *, create: bool) -> int:
    """A descriptor on ``.trash``: a symlink in its place (which would take
    every move and deletion out of the root) is ``UnsafePath``."""
    base = trash_root(root)
    if create:
        ensure_dir(base)
    return _open_dir(base)


@contextmanager
def trash_lock(root: Path) -> Iterator[None]:
    """The one lock every lifecycle operation on ``root`` holds."""
    base = _open_trash(root, create=True)
    try:
        fd = open_regular(".lock", os.O_RDWR | os.O_CREAT, FILE_MODE, dir_fd=base, shown=trash_root(root) / ".lock")
    finally:
        os.close(base)
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
    return datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S%fZ")


def iso(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# ---------------------------------------------------------------------- session


def _item(root: Path, path: Path, kind: Literal["file", "dir"], size: int, files: int = 1) -> TrashedItem:
    text, raw = path_text(str(path.relative_to(root)))
    return TrashedItem(path=text, raw=raw, kind=kind, bytes=size, files=files)


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
        if stat.S_ISREG(st.st_mode):
            items.append(_item(root, p, "file", st.st_size))
        elif stat.S_ISDIR(st.st_mode):
            size, count, _ = tree_stats(p)
            items.append(_item(root, p, "dir", size, count))
        elif p == main:
            raise bad_request(f"{shown(p)} is not a regular file")
    for f in flat_agents(main.parent).get(sid, []):  # Claude Code 2.0.x's subagent files beside it
        items.append(_item(root, Path(f.src), "file", os.lstat(f.src).st_size))
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
        locked = [main, *_jsonl_files(main.parent / sid)[:MAX_LOCKED - 1]]
        return _move_in(root, f"{_stamp(now)}-{sid}", sid, main.parent, items, locked, reason, now)


def trash_agent(root: Path, main: Path, agent: str, run: str | None = None, *, reason: str = "rm",
                now: float | None = None) -> TrashEntry:
    """Move one agent transcript of the session whose main transcript is
    ``main`` (which need not exist) into the trash, in an entry of its own; the
    session and its other files stay."""
    root = Path(root)
    sid = main.name[: -len(".jsonl")]
    main = check_transcript_path(root, main, sid)
    path = agent_file(main.parent, sid, agent, run)
    now = time.time() if now is None else now
    with trash_lock(root):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise not_found(f"no transcript of agent {agent} of session {sid}") from None
        if not stat.S_ISREG(st.st_mode):
            raise bad_request(f"{shown(path)} is not a regular file")
        name = f"{_stamp(now)}-{sid}{AGENT_MARK}" + (f"{run}{AGENT_MARK}" if run else "") + agent
        return _move_in(root, name, sid, main.parent, [_item(root, path, "file", st.st_size)], [path], reason, now)


def _move_in(root: Path, name: str, sid: str, project: Path, items: list[TrashedItem], locked: list[Path],
             reason: str, now: float) -> TrashEntry:
    """Make the entry ``name`` and move ``items`` into it (the caller holds the
    trash lock): its manifest first, saying ``trashing``, then the moves, each
    one ``rename``, with the writers' locks of ``locked`` held, then ``trashed``.
    A step that fails (a full disk: no room for the manifest) undoes the moves
    made and the entry (``_undo``): the trash never names a session it does
    not hold whole, or a daemon would refuse its writes as trashed."""
    entry_dir = trash_root(root) / name
    os.mkdir(entry_dir, DIR_MODE)
    entry = TrashEntry(name=name, session=sid, project=shown(project.name), trashedAt=iso(now), reason=reason,
                       bytes=sum(i.bytes for i in items), items=items, files=sum(i.files for i in items),
                       state="trashing")
    moved: list[TrashedItem] = []
    try:
        write_manifest(entry_dir, entry)
        fsync_dir(entry_dir.parent)
        for parent in {(entry_dir / "files" / item.rel).parent for item in items}:
            ensure_dir(parent)
        with _writers_locked(locked):
            for item in items:
                rename_noreplace(root / item.rel, entry_dir / "files" / item.rel)
                moved.append(item)
        for parent in {(root / item.rel).parent for item in items} | {(entry_dir / "files" / item.rel).parent for item in items}:
            fsync_dir(parent)
        entry.state = "trashed"
        write_manifest(entry_dir, entry)
    except OSError:
        _undo(root, entry_dir, moved)
        raise
    return entry


def _undo(root: Path, entry_dir: Path, moved: list[TrashedItem]) -> None:
    """Put ``moved`` back and delete the entry of an rm that failed. A move
    back that fails leaves the entry as it is: its manifest (``trashing``)
    lets ``trash_recovery`` settle it at the next start."""
    try:
        for item in reversed(moved):
            rename_noreplace(entry_dir / "files" / item.rel, root / item.rel)
        discard(entry_dir)
    except OSError as exc:
        log.error("trash: cannot undo the failed move of %s: %s", shown(entry_dir.name), reason(exc))


def entries(root: Path) -> list[TrashEntry]:
    """Every trashed session, oldest first (entries still being moved included,
    with their state); one whose manifest cannot be used is skipped with a
    warning (``skipped``)."""
    base = trash_root(Path(root))
    try:
        fd = _open_trash(Path(root), create=False)
    except FileNotFoundError:
        return []
    try:
        names = sorted(n for n in os.listdir(fd) if not n.startswith("."))
    finally:
        os.close(fd)
    out = []
    for n in names:
        try:
            out.append(read_manifest(base / n))
        except (OSError, ValueError, msgspec.DecodeError) as exc:
            skipped(n, exc)
    return out


def skipped(name: str, why: BaseException | str) -> None:
    """Say that the trash entry ``name`` is left alone, and why."""
    log.warning("trash: skipping entry %s: %s", shown(name), reason(why))


def reason(why: BaseException | str) -> str:
    """Why an entry is skipped, as one line of UTF-8 text."""
    if isinstance(why, OSError) and why.strerror:
        why = why.strerror
    return shown(str(why))


def trashed_ids(root: Path) -> set[str]:
    """Session ids in the trash, from the entry names alone (no manifest read)."""
    try:
        names = os.listdir(trash_root(Path(root)))
    except FileNotFoundError:
        return set()
    return {n[-36:] for n in names
            if not n.startswith(".") and len(n) > 37 and AGENT_MARK not in n and is_session_id(n[-36:])}


def restore_session(root: Path, session: str) -> TrashEntry:
    """Put the newest trashed copy of ``session`` back, byte for byte; refuses
    when any of its paths exists again (nothing is overwritten)."""
    root = Path(root)
    session = check_session_id(session)
    with trash_lock(root), StoreRoot(root) as store:
        # a manifest may name the session in another form (a file imported under it): the same session
        candidates = [e for e in entries(root) if e.state == "trashed" and _canonical(e.session) == session]
        if not candidates:
            raise not_found(f"session {session} is not in the trash")
        entry = candidates[-1]
        entry_dir = trash_root(root) / entry.name
        try:
            _restore(store, root, entry_dir, entry)
        except UnsafePath as exc:
            raise error_for(exc, "restore") from None
        return entry


def _canonical(session: str) -> str:
    return check_session_id(session) if is_session_id(session) else session


def _restore(store: StoreRoot, root: Path, entry_dir: Path, entry: TrashEntry) -> None:
    for item in entry.items:  # every way checked before anything moves
        if not lexists_in(store, entry_dir / "files" / item.rel):
            raise not_found(f"{shown(entry_dir / 'files' / item.rel)} is missing from the trash; nothing restored")
        if lexists_in(store, root / item.rel):
            raise conflict(f"{root / item.path} exists again; refusing to overwrite it (move it away, then restore)")
    entry.state = "restoring"
    write_manifest(entry_dir, entry)
    moved: list[TrashedItem] = []
    try:
        for item in entry.items:
            move(store, entry_dir / "files" / item.rel, root / item.rel)
            moved.append(item)
    except OSError:
        for item in reversed(moved):
            move(store, root / item.rel, entry_dir / "files" / item.rel)
        entry.state = "trashed"
        write_manifest(entry_dir, entry)
        raise
    for parent in {(root / i.rel).parent for i in entry.items}:
        fsync_dir(parent)
    discard(entry_dir)
    entry.state = "restored"


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
