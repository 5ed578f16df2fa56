"""Importing existing Claude Code sessions into the store, every file as it is.

Why file copies and not appends of entries: an import must keep each file byte
for byte (summary-only files whose summaries title other sessions, inline 1.0.x
sidechains, lines that repeat a uuid on purpose), and the append path would
route, deduplicate and hold back entries by design. So a session's files are
copied: a new file whole (to a temp file, synced, then linked into place, so it
appears complete or not at all), a file that grew since by its new whole lines
only (under the writers' exclusive ``flock``, after checking that what the store
holds is a prefix of the source), and a copy that differs is reported
``diverged`` and never overwritten. A second run imports nothing. A meta file
(``.meta.json``) is the exception: a state its writer replaces whole, so the
source's, written after the store's copy was, replaces that copy (``merged``).

A transcript under another name (a shared ``chat.jsonl``, an Entire checkpoint
``full.jsonl``) is the session its entries name (the last ``sessionId`` in the
file), imported as ``<id>.jsonl`` into the project its cwd names. Two files of
one session (two checkpoints, a checkpoint and the live file) are merged by
uuid: the lines of the second whose uuid (or, for a line without one, whose
bytes) the store's copy lacks are appended, ``merged``; a copy is never
overwritten, and a source with a line that is no entry is ``diverged``.

``plan`` turns the user's paths (a projects dir, a project dir, ``.jsonl``
files) into one ``SessionSource`` per session; ``import_session`` copies one.
The daemon runs ``import_session`` for an ``Import`` request (so its catalog and
its sessions learn of the change), the CLI runs it itself when no daemon runs.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from sessiond.wire.errors import SessiondError, bad_request
from sessiond.wire.records import FileResult, ImportFile, SessionSource, Status

from .appendfile import append_unlocked, ensure_dir, entries_end, file_lock, fsync_dir, write_all
from .entries import decode_object
from .paths import canonical_cwd, check_inside, check_session_id, is_session_id, projects_dir, sanitize
from .regular import describe, open_regular
from .safeopen import FILE_MODE, StoreRoot

STATUSES: tuple[str, ...] = ("imported", "grown", "merged", "unchanged", "diverged", "unreadable", "busy")
CHUNK = 8 * 1024 * 1024


def session_status(results: list[FileResult]) -> Status:
    """One word for a session: the most telling of its files' outcomes."""
    present = {r.status for r in results}
    for status in ("busy", "diverged", "unreadable", "imported", "merged", "grown"):
        if status in present:
            return status
    return "unchanged"


# ----------------------------------------------------------------------- planning


Skipped = dict[str, str]
"""The paths an import leaves out, each with why (what ``import`` says of it)."""

NOT_NAMED = "not named <session id>.jsonl (name the file itself to import it by the session its entries name)"
NO_CWD = "in no project dir and records no cwd (import the project dir it came from)"


def why_not(path: Path | str) -> str:
    """Why a file found beside the sessions is no session file: a symlink
    (never followed out of the source), what is not a regular file (a FIFO
    would block the copy), or a name that is no session's."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file ({describe(st.st_mode)})"
    return NOT_NAMED if str(path).endswith(".jsonl") else "not a session's file"


def _regular_files(d: Path, base: Path) -> tuple[list[ImportFile], Skipped]:
    files: list[ImportFile] = []
    skipped: Skipped = {}
    for dirpath, dirs, names in os.walk(d):
        for name in sorted(names) + [x for x in dirs if os.path.islink(os.path.join(dirpath, x))]:
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file():
                skipped[str(p)] = why_not(p)
                continue
            files.append(ImportFile(src=str(p), rel=str(p.relative_to(base))))
        dirs[:] = sorted(x for x in dirs if not os.path.islink(os.path.join(dirpath, x)))
    return files, skipped


FIRST_LINE_MAX = 1 << 20
FLAT_AGENT = re.compile(r"agent-[A-Za-z0-9_-]{1,128}\.jsonl")
"""Claude Code 2.0.x kept subagent transcripts beside the sessions, in the project dir."""


def flat_agent_session(path: Path | str) -> str | None:
    """The session a flat ``agent-<id>.jsonl`` belongs to: the ``sessionId`` of
    its first entry (a subagent's entries carry their parent session's id)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(FIRST_LINE_MAX)
    except OSError:
        return None
    entry = decode_object(first.rstrip(b"\r\n"))
    sid = entry.get("sessionId") if entry else None
    return check_session_id(sid) if isinstance(sid, str) and is_session_id(sid) else None


def flat_agents(project: Path) -> dict[str, list[ImportFile]]:
    """The flat agent files of a project dir, by the session they belong to."""
    out: dict[str, list[ImportFile]] = {}
    try:
        entries = sorted(os.scandir(project), key=lambda e: e.name)
    except OSError:
        return out
    for e in entries:
        if FLAT_AGENT.fullmatch(e.name) and e.is_file(follow_symlinks=False):
            owner = flat_agent_session(e.path)
            if owner is not None:
                out.setdefault(owner, []).append(ImportFile(src=e.path, rel=e.name))
    return out


def _project_sessions(project: Path) -> tuple[list[SessionSource], Skipped]:
    """The sessions of a project dir, each by its canonical id (``check_session_id``)
    with the names its files have here: ``ABC….jsonl`` or ``{abc…}.jsonl`` is
    imported as ``abc….jsonl``, the name every command looks a session up by.
    A dir whose name is no project dir's (``~/backup``, ``.old``) names no
    project: each session goes into the one its recorded cwd names, as a
    session file imported on its own does (``_placed_by_cwd``)."""
    flat = flat_agents(project)
    names: dict[str, set[str]] = {sid: set() for sid in flat}
    skipped: Skipped = {}
    for e in sorted(os.scandir(project), key=lambda e: e.name):
        if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False):
            if is_session_id(e.name[:-6]):
                names.setdefault(check_session_id(e.name[:-6]), set()).add(e.name[:-6])
            elif not any(f.rel == e.name for files in flat.values() for f in files):
                skipped[e.path] = NOT_NAMED
        elif is_session_id(e.name) and e.is_dir(follow_symlinks=False):
            names.setdefault(check_session_id(e.name), set()).add(e.name)
        elif e.name.endswith(".jsonl"):
            skipped[e.path] = why_not(e.path)
    found = [s for sid in sorted(names) if (s := _session(project, sid, sorted(names[sid]), skipped, flat.get(sid, [])))
             is not None]
    if _PROJECT_NAME.fullmatch(project.name):
        return found, skipped
    return _placed_by_cwd(found, skipped), skipped


def _placed_by_cwd(sessions: list[SessionSource], skipped: Skipped) -> list[SessionSource]:
    """``sessions`` found in a dir that names no project, each moved to the
    project its transcripts' recorded cwd names (the main transcript's first,
    else an agent file's); one recording none is added to ``skipped``."""
    placed = []
    for s in sessions:
        ordered = sorted((f for f in s.files if f.rel.endswith(".jsonl")), key=lambda f: f.rel != f"{s.session}.jsonl")
        project = next((p for f in ordered if (p := _readable_cwd_project(Path(f.src))) is not None), None)
        if project is None:
            skipped.update((f.src, NO_CWD) for f in s.files)
            continue
        s.project = project
        placed.append(s)
    return placed


def _readable_cwd_project(src: Path) -> str | None:
    """``_cwd_project``, None for a file that cannot be read."""
    try:
        return _cwd_project(src)
    except OSError:
        return None


def _session(project: Path, sid: str, names: list[str], skipped: Skipped,
             flat: list[ImportFile] = []) -> SessionSource | None:  # noqa: B006
    """Session ``sid``'s files in ``project``, found under each of ``names`` (the
    forms of its id its files have there), each destined for its canonical name."""
    files = list(flat)
    for name in names:
        main = project / f"{name}.jsonl"
        if main.is_file() and not main.is_symlink():
            files.append(ImportFile(src=str(main), rel=f"{sid}.jsonl"))
        side = project / name
        if side.is_dir() and not side.is_symlink():
            more, bad = _regular_files(side, project)
            files += [ImportFile(src=f.src, rel=sid + f.rel[len(name):]) for f in more]
            skipped.update(bad)
    return SessionSource(project=project.name, session=sid, files=files) if files else None


_SESSION_ID_FIELD = re.compile(rb'"sessionId"\s*:\s*"([0-9A-Fa-f-]{36})"')
_ID_WINDOW = 1 << 20


def entries_session(src: Path) -> str | None:
    """The session a transcript under any name is: the last ``sessionId`` of its
    last MB (a conversation resumed from an older copy keeps the old id on its
    first entries, the file is named by the newest), else of its first MB."""
    try:
        with open(src, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - _ID_WINDOW))
            tail = f.read(_ID_WINDOW)
            f.seek(0)
            head = f.read(_ID_WINDOW) if size > _ID_WINDOW else b""
    except OSError:
        return None
    for window, last in ((tail, True), (head, False)):
        found: list[str] = [m.decode() for m in _SESSION_ID_FIELD.findall(window) if is_session_id(m.decode())]
        if found:
            return (found[-1] if last else found[0]).lower()
    return None


def _named_by_entries(src: Path) -> SessionSource | None:
    """A transcript whose name is no session id: the session its entries name,
    as ``<id>.jsonl`` (None when it is no session: a subagent's, empty, only
    metadata, or no id in it)."""
    from .lite import SESSION, read_lite

    try:
        if read_lite(src).state != SESSION:
            return None
    except OSError:
        return None
    sid = entries_session(src)
    if sid is None:
        return None
    project = src.parent.name if _PROJECT_NAME.fullmatch(src.parent.name) else _recorded_project(src)
    return SessionSource(project=project, session=sid, files=[ImportFile(src=str(src), rel=f"{sid}.jsonl")])


def _is_project_dir(d: Path) -> bool:
    with os.scandir(d) as it:
        return any(e.name.endswith(".jsonl") or is_session_id(e.name) for e in it)


_PROJECT_NAME = re.compile(r"-.*|[A-Za-z]--.*")
"""What a project dir's name looks like: a sanitized absolute path (``/`` and
``C:\\`` become ``-`` and ``C--``)."""


def _recorded_project(src: Path) -> str:
    """The project dir of a session file found outside any project dir (``~/torn/
    <id>.jsonl``): the one its recorded cwd names, where Claude Code keeps it;
    the folder it was copied into names no project."""
    try:
        project = _cwd_project(src)
    except OSError as exc:
        raise bad_request(f"{src}: {exc.strerror or exc}") from None
    if project is None:
        raise bad_request(f"{src} is not in a project dir and records no cwd: import the project dir it came from")
    return project


def _cwd_project(src: Path) -> str | None:
    """The project dir the recorded cwd of transcript ``src`` names (None: it
    records no absolute cwd that could be one)."""
    from .lite import read_lite

    cwd = read_lite(src).cwd
    if not cwd or not os.path.isabs(cwd):
        return None
    try:
        return sanitize(canonical_cwd(cwd))
    except SessiondError:  # no cwd at all: a NUL in it, longer than PATH_MAX
        return None


def plan(sources: list[Path]) -> tuple[list[SessionSource], Skipped]:
    """The sessions to import from ``sources``, and the paths that cannot be,
    each with why (not a session file, a symlink, not a regular file, in no
    project dir and no cwd recorded). A directory holding ``.jsonl`` files or
    session dirs is a project dir; any other directory is a projects dir (its
    subdirectories are project dirs); a dir with a ``projects/`` inside
    (``~/.claude``) stands for that."""
    sessions: dict[tuple[str, str], SessionSource] = {}
    skipped: Skipped = {}

    def add(found: list[SessionSource]) -> None:
        for s in found:  # a session met twice (two files of it) imports both: the second merges
            have = sessions.setdefault((s.project, s.session), s)
            if have is not s:
                have.files += [f for f in s.files if f.src not in {g.src for g in have.files}]

    for src in sources:
        src = Path(os.path.abspath(src))
        if src.is_symlink() and not src.is_dir():
            skipped[str(src)] = why_not(src)
        elif src.is_file():
            sid = src.name[:-6] if src.name.endswith(".jsonl") else ""
            if is_session_id(sid):
                canonical = check_session_id(sid)
                session = _session(src.parent, canonical, [sid], skipped, flat_agents(src.parent).get(canonical, []))
            elif FLAT_AGENT.fullmatch(src.name):
                session = None
                skipped[str(src)] = "a subagent's file: import its session (its <session id>.jsonl, or the project dir)"
            else:
                session = _named_by_entries(src)
            if session is None:
                skipped.setdefault(str(src), "no conversation of a session in it (empty, only metadata, or no sessionId)")
            else:
                if not _PROJECT_NAME.fullmatch(session.project):
                    session.project = _recorded_project(src)
                add([session])
        elif src.is_dir():
            if (src / "projects").is_dir() and not _is_project_dir(src):
                src = src / "projects"
            if _is_project_dir(src):
                found, bad = _project_sessions(src)
                add(found)
                skipped.update(bad)
            else:
                for d in sorted(p for p in src.iterdir() if p.is_dir()):
                    if d.is_symlink():  # never followed out of the source
                        skipped[str(d)] = why_not(d)
                        continue
                    found, bad = _project_sessions(d)
                    add(found)
                    skipped.update(bad)
        elif os.path.lexists(src):  # a FIFO, a socket, a device: never opened
            skipped[str(src)] = why_not(src)
        else:
            raise bad_request(f"{src}: no such file or directory")
    return list(sessions.values()), skipped


def inside_store(root: Path, source: SessionSource) -> bool:
    """The source already is the store's own copy (importing the root itself)."""
    base = os.path.realpath(projects_dir(Path(root))) + os.sep
    return bool(source.files) and all(os.path.realpath(f.src).startswith(base) for f in source.files)


# ------------------------------------------------------------------------ copying


def destination(root: Path, source: SessionSource, f: ImportFile) -> Path:
    """Where a source file goes, after refusing any name that could escape the
    session's own files (the daemon takes these names from a client)."""
    project = source.project
    if not project or project.startswith(".") or "/" in project or "\x00" in project:
        raise bad_request(f"not a project dir name: {project!r}")
    if not is_session_id(source.session):
        raise bad_request(f"session id must be a UUID: {source.session!r}")
    parts = f.rel.split("/")
    if f.rel == f"{source.session}.jsonl" or FLAT_AGENT.fullmatch(f.rel):
        pass
    elif len(parts) < 2 or parts[0] != source.session or any(p in ("", ".", "..") or "\x00" in p for p in parts):
        raise bad_request(f"{f.rel!r} is not a file of session {source.session}")
    return check_inside(root, projects_dir(Path(root)) / project / f.rel)


def _same(a: int, b: int, length: int) -> bool:
    off = 0
    while off < length:
        n = min(CHUNK, length - off)
        if os.pread(a, n, off) != os.pread(b, n, off):
            return False
        off += n
    return True


def _copy_range(src: int, dst: int, start: int, end: int, path: Path) -> None:
    off = start
    while off < end:
        data = os.pread(src, min(CHUNK, end - off), off)
        if not data:
            raise OSError(f"source shrank while being read ({path.name})")
        cut = data.rfind(b"\n") + 1  # whole lines per write: a kill between two leaves no torn line
        if 0 < cut < len(data):
            data = data[:cut]
        append_unlocked(dst, path, data, known_end=off)
        off += len(data)


def _copy_new(src: int, end: int, dest: Path) -> bool:
    """A new file, complete or not at all; False when one appeared meanwhile.

    Written into an anonymous file (``O_TMPFILE``) that is linked into place only
    once synced: a kill half-way through leaves nothing behind in the store.
    Where the filesystem (or the system: no ``/proc``) lacks it, a dot-named
    temp file is used."""
    ensure_dir(dest.parent)
    tmp: Path | None = None
    try:
        if not os.path.isdir("/proc/self/fd"):  # linking an anonymous file needs its /proc name
            raise OSError("no /proc")
        fd = os.open(dest.parent, os.O_RDWR | os.O_TMPFILE | os.O_CLOEXEC, FILE_MODE)
    except (AttributeError, OSError):
        tmp = dest.with_name(f".{dest.name}.import-{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        off = 0
        while off < end:
            data = os.pread(src, min(CHUNK, end - off), off)
            if not data:
                raise OSError(f"source shrank while being read ({dest.name})")
            write_all(fd, data)
            off += len(data)
        os.fsync(fd)
        try:  # never replaces: a file that appeared meanwhile wins
            if tmp is not None:
                os.link(tmp, dest)
            else:  # a dir fd makes os.link use linkat(AT_SYMLINK_FOLLOW), which /proc/self/fd needs
                dfd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.link(f"/proc/self/fd/{fd}", dest, src_dir_fd=dfd, follow_symlinks=True)
                finally:
                    os.close(dfd)
        except FileExistsError:
            return False
    finally:
        os.close(fd)
        if tmp is not None:
            os.unlink(tmp)
    fsync_dir(dest.parent)
    return True


def import_file(root: Path, src_path: str, dest: Path) -> FileResult:
    rel = dest.name
    try:
        src = open_regular(src_path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        return FileResult(rel=rel, status="unreadable", error=exc.strerror or str(exc))
    try:
        size = os.fstat(src).st_size
        end = entries_end(src, size) if dest.suffix == ".jsonl" else size
        if not os.path.lexists(dest) and _copy_new(src, end, dest):
            result = FileResult(rel=rel, status="imported", bytes=end)
        elif dest.suffix != ".jsonl" and _newer_state(src, end, dest):
            with StoreRoot(root) as store:  # renamed over it, as the daemon replaces a meta file
                store.write_atomic(dest, os.pread(src, end, 0))
            result = FileResult(rel=rel, status="merged", bytes=end)
        else:  # there already, or it appeared meanwhile
            result = _merge(src, end, dest, rel)
        if result.bytes:
            _keep_mtime(src, dest)
        return result
    except OSError as exc:
        return FileResult(rel=rel, status="unreadable", error=exc.strerror or str(exc))
    finally:
        os.close(src)


META_MAX = 1 << 20
"""The largest meta file an import replaces (Claude Code's are a few hundred bytes)."""


def _newer_state(src: int, end: int, dest: Path) -> bool:
    """A meta file (``agent-<id>.meta.json``: a state Claude Code replaces
    whole, when an agent stops or is revived) that differs from the store's
    copy and was written after it: the newer state replaces the older one,
    as its writer's own replace does. A store copy written since the source
    was (by the daemon, by hand) is not, and is reported ``diverged``."""
    try:
        st = os.lstat(dest)
        if not stat.S_ISREG(st.st_mode) or end > META_MAX or os.fstat(src).st_mtime_ns <= st.st_mtime_ns:
            return False
        with open(dest, "rb", opener=lambda p, f: open_regular(p, f | os.O_NOFOLLOW)) as have:
            return have.read(META_MAX + 1) != os.pread(src, end, 0)
    except OSError:
        return False


def _keep_mtime(src: int, dest: Path) -> None:
    """The copy keeps the source's modification time: a session last written a
    year ago is not made young (listing, ``prune --older-than``) by importing it."""
    st = os.fstat(src)
    try:
        os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
    except OSError:
        pass


def _merge(src: int, end: int, dest: Path, rel: str) -> FileResult:
    """The store has the file already: unchanged, grown by new whole lines, or diverged."""
    fd = os.open(dest, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return FileResult(rel=rel, status="diverged", error="the store holds something else at this path")
        with file_lock(fd):
            have = os.fstat(fd).st_size
            if not _same(src, fd, min(have, end)):
                if dest.suffix == ".jsonl":
                    return _merge_by_uuid(src, end, fd, have, dest, rel)
                return FileResult(rel=rel, status="diverged", error="the store's copy differs from the source")
            if have >= end:
                return FileResult(rel=rel, status="unchanged")
            if dest.suffix != ".jsonl":
                return FileResult(rel=rel, status="diverged", error="the store's copy differs from the source")
            _copy_range(src, fd, have, end, dest)
            return FileResult(rel=rel, status="grown", bytes=end - have)
    finally:
        os.close(fd)


def _lines(fd: int, end: int) -> list[bytes]:
    data = bytearray()
    off = 0
    while off < end:
        chunk = os.pread(fd, min(CHUNK, end - off), off)
        if not chunk:
            break
        data += chunk
        off += len(chunk)
    return [line for line in bytes(data).split(b"\n") if line.strip()]


def _merge_by_uuid(src: int, end: int, fd: int, have: int, dest: Path, rel: str) -> FileResult:
    """Two copies of one session that are not one the other's prefix (two
    checkpoints of it, one redacted): the source's entries the store's copy
    lacks are appended (by uuid; a line without one by its bytes), in the
    source's order; nothing of the store's copy changes (called under its lock)."""
    held_uuids: set[str] = set()
    held_lines: set[bytes] = set()
    for line in _lines(fd, have):
        held_lines.add(line)
        obj = decode_object(line)
        if obj is not None and isinstance(obj.get("uuid"), str):
            held_uuids.add(obj["uuid"])
    new: list[bytes] = []
    for line in _lines(src, end):
        obj = decode_object(line)
        if obj is None:
            return FileResult(rel=rel, status="diverged",
                              error="the store's copy differs from the source, which holds a line that is no entry")
        uuid = obj.get("uuid")
        if isinstance(uuid, str):
            if uuid in held_uuids:
                continue
            held_uuids.add(uuid)
        elif line in held_lines:
            continue
        held_lines.add(line)
        new.append(line)
    if not new:
        return FileResult(rel=rel, status="unchanged")
    lead = b"\n" if have and os.pread(fd, 1, have - 1) != b"\n" else b""
    data = lead + b"\n".join(new) + b"\n"
    append_unlocked(fd, dest, data, known_end=have)
    return FileResult(rel=rel, status="merged", bytes=len(data))


def import_session(root: Path, source: SessionSource) -> list[FileResult]:
    """Copy one session's files into the store (see the module doc)."""
    out = []
    for f in source.files:
        result = import_file(root, f.src, destination(root, source, f))
        result.rel = f.rel
        out.append(result)
    return out
