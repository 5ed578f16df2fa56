"""pull and push: a session through the NATS JetStream mirror (see sessiond/mirror/).

Both talk to NATS from this process with the daemon's own ``[mirror]`` settings
(the same config file), so they work with no daemon running and need no new
request on the socket.

``pull ID`` hydrates the session's files, subagent files included, from the
stream: every message is a byte range with its file offset, so each range is put
exactly where it was in the source and the copy is byte-identical. Ranges already
present (a resend, or a file pulled before) are compared, not written twice; a
local file that differs from the stream is left as it is and reported, as is a
hole in the stream or a copy that ends inside a line (the whole lines before it
are kept). Appends go under the writers' ``flock`` and check the file did not
grow meanwhile, so a pull never interleaves with a daemon or fallback writer.

The stream is shared: anyone with access may have published to it. Every
subject, header and offset is checked (``place``); a message that is not a
range of the session's own files is skipped with one line saying why, a file
with a problem stops being pulled while the others go on, and the pull ends
with a summary and a non-zero exit. What it holds in memory is bounded
(``FLUSH_BYTES``, ``EARLY_BYTES``, ``MAX_FILES``) whatever the stream holds, and
it reads up to the stream's end at its start, so a session someone keeps
writing to still ends.

``push ID`` backfills a local session: for each file the stream is asked where
its copy ends, and the rest is published (the daemon does the same for any file
it writes; push covers sessions nobody writes any more).
"""

from __future__ import annotations

import heapq
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sessiond.wire.errors import SessiondError, not_found

from . import Context, cli
from .completion import complete_session
from .group import Seconds
from .output import count, echo, echo_json, printable_name, shell_word, size

if TYPE_CHECKING:
    from sessiond.mirror.stream_format import FileRef
    from sessiond.store.safeopen import StoreRoot

FLUSH_BYTES = 4 * 1024 * 1024
"""What a pull holds of received ranges before writing them: all files together."""
EARLY_BYTES = 16 * 1024 * 1024
"""What a pull holds of ranges that start past the end of their file so far (a
range resent out of order), all files together; one that would hold more is
skipped and the hole before it reported."""
MAX_FILES = 10_000
"""Files of one session a pull takes (a main transcript and its agent files);
ranges of more are skipped, so a stream naming millions cannot exhaust memory."""
HELD_OVERHEAD = 128
"""What holding one range costs beyond its bytes (the object and its entry),
counted in both bounds: a stream of one-byte ranges is held like one of big ones."""
SHOWN_SKIPS = 100
"""Skipped messages told one line each; beyond, only counted in the summary."""
CONNECT_TIMEOUT = 15.0


def _mirror_settings(obj: Context, config_path: Path | None, servers: tuple[str, ...]):
    """(settings, root): the daemon's [mirror] table, ``--server`` overriding its servers."""
    import msgspec

    from sessiond.config import ConfigError, build, mirror_settings
    from sessiond.config_keys import MirrorFileConfig

    try:
        settings = build({"root": str(obj.root) if obj.root else None}, config_path)
        if servers:  # checked like the file's, then overriding only the servers
            given = mirror_settings(MirrorFileConfig(servers=list(servers)))
            settings.mirror = msgspec.structs.replace(settings.mirror or given, servers=given.servers)
    except ConfigError as exc:
        raise SessiondError(f"config: {exc}", code="bad_request") from None
    if settings.mirror is None:
        from sessiond.store.locations import config_path as default_config

        where = config_path or settings.config_file or default_config()
        if not where.exists():
            raise SessiondError(f"no mirror configured: there is no config file {where}; create it with a [mirror] "
                                "section (servers = [\"nats://host:4222\"]) or pass --server URL", code="bad_request")
        raise SessiondError(f"no [mirror] section in {where} (and no --server given)", code="bad_request")
    from sessiond.mirror import require_client

    try:
        require_client()
    except ConfigError as exc:
        raise SessiondError(str(exc), code="bad_request") from None
    return settings.mirror, settings.root


def _run(coro, timeout: float):
    """Run a NATS coroutine; its failures become one line on stderr."""
    import asyncio

    import nats.errors

    async def bounded():
        async with asyncio.timeout(timeout):
            return await coro

    try:
        return asyncio.run(bounded())
    except TimeoutError:
        raise SessiondError(f"the mirror did not answer within {timeout:g}s", code="mirror_unavailable") from None
    except nats.errors.Error as exc:
        raise SessiondError(f"mirror: {type(exc).__name__}: {exc}".rstrip(": "), code="mirror_unavailable") from None


# ------------------------------------------------------------------------ pull


class FileProblem(Exception):
    """Why one file of a session is not (or not wholly) pulled: its other files are."""


class FileSink:
    """One local file rebuilt from ranges: appends what extends it, checks what
    overlaps it, holds what comes early (a range resent out of order).

    It holds no descriptor between writes (a session may have thousands of agent
    files), creates the file only when it has bytes for it, opens it below the
    root without following symlinks, and never leaves a line of its own torn: a
    file the stream ends (or the pull stops) inside a line is cut back to its
    last whole line, which it had before or this pull wrote."""

    def __init__(self, store: StoreRoot, path: Path, budget: PullBudget) -> None:
        from sessiond.store.appendfile import ends_torn

        self.store = store
        self.path = path
        self.budget = budget
        try:
            fd = store.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self.flushed = 0
        else:
            try:
                self.flushed = os.fstat(fd).st_size
                if ends_torn(fd, self.flushed):
                    raise FileProblem(f"it ends in a torn line; run `sessiond repair {shell_word(str(path))}` first")
            finally:
                os.close(fd)
        self.existing = self.flushed
        self.end = self.flushed
        self.buf: list[bytes] = []
        self.early: dict[int, bytes] = {}  # ranges past the end so far, by start
        self.starts: list[int] = []  # their starts, a heap

    @property
    def added(self) -> int:
        """The bytes this pull wrote to the file."""
        return self.flushed - self.existing

    def add(self, start: int, data: bytes) -> str | None:
        """Place a range; why it was skipped (it starts past a hole and the
        ranges held there are at their bound), else None. ``FileProblem``: the
        local file differs from the stream."""
        if start > self.end:
            return self._hold(start, data)
        self._place(start, data)
        while self.starts and self.starts[0] <= self.end:  # what was early and now joins
            s = heapq.heappop(self.starts)
            held = self.early.pop(s)
            self.budget.early -= len(held) + HELD_OVERHEAD
            self._place(s, held)
        return None

    def _hold(self, start: int, data: bytes) -> str | None:
        held = self.early.get(start)
        if held is not None and len(data) <= len(held):
            return None
        grows = len(data) - len(held) if held is not None else len(data) + HELD_OVERHEAD
        if self.budget.early + grows > EARLY_BYTES:
            return f"it starts at byte {start} of {self.path.name}, past a hole at {self.end}"
        if held is None:
            heapq.heappush(self.starts, start)
        self.budget.early += grows
        self.early[start] = data
        return None

    def _place(self, start: int, data: bytes) -> None:
        """A range that starts at or before the end so far: compare the overlap, keep the rest."""
        if start < self.end:
            overlap = min(len(data), self.end - start)
            self._check(start, data[:overlap])
            data = data[overlap:]
        if data:
            self.buf.append(data)
            self.end += len(data)
            self.budget.buffered += len(data) + HELD_OVERHEAD

    def _check(self, start: int, expected: bytes) -> None:
        self.flush()
        fd = self.store.open(self.path, os.O_RDONLY)
        try:
            same = os.pread(fd, len(expected), start) == expected
        finally:
            os.close(fd)
        if not same:
            raise FileProblem(f"it differs from the mirror's copy at offset {start}: "
                              "the local session and the remote one diverged; move one aside to pull")

    def flush(self) -> None:
        if not self.buf:
            return
        from sessiond.store.appendfile import file_lock, write_all

        data = b"".join(self.buf)
        fd, _ = self.store.open_append(self.path)
        try:
            with file_lock(fd):
                now = os.fstat(fd).st_size
                if now != self.flushed:
                    raise FileProblem(f"it was written to during the pull (at {now} bytes, expected {self.flushed})")
                try:
                    write_all(fd, data)
                except OSError:  # no space left, say: nothing of this write stays
                    try:
                        os.ftruncate(fd, self.flushed)
                    except OSError:
                        pass
                    raise
        finally:
            os.close(fd)
        self.flushed += len(data)
        self.budget.buffered -= len(data) + HELD_OVERHEAD * len(self.buf)
        self.buf = []

    def drop(self) -> None:
        """Let go of what is held (the file is not pulled further)."""
        self.budget.buffered -= sum(map(len, self.buf)) + HELD_OVERHEAD * len(self.buf)
        self.budget.early -= sum(map(len, self.early.values())) + HELD_OVERHEAD * len(self.early)
        self.buf, self.early, self.starts = [], {}, []
        self.end = self.flushed

    def finish(self) -> None:
        """Write the rest; ``FileProblem`` for a hole or a torn end (whole
        lines kept)."""
        self.flush()
        if self.early:
            hole = self.starts[0]
            self.drop()
            raise FileProblem(f"the stream's copy has a hole at bytes {self.end}-{hole}")
        end = self.end
        if self.whole_lines() < end:
            raise FileProblem(f"the stream's copy ends inside a line (at byte {self.end}); the whole lines before it are pulled")
        if self.added:
            fd = self.store.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def whole_lines(self) -> int:
        """Cut a torn tail this pull wrote back to the last whole line; where the file ends now."""
        from sessiond.store.appendfile import file_lock, line_start_before

        self.drop()
        if self.flushed == self.existing:
            return self.end
        fd = self.store.open(self.path, os.O_RDWR)
        try:
            with file_lock(fd):
                if os.fstat(fd).st_size != self.flushed or os.pread(fd, 1, self.flushed - 1) == b"\n":
                    return self.end
                keep = max(self.existing, line_start_before(fd, self.flushed))
                os.ftruncate(fd, keep)
                os.fsync(fd)
        finally:
            os.close(fd)
        self.flushed = self.end = keep
        return keep


class PullBudget:
    """What a pull holds in memory across the files of a session."""

    def __init__(self) -> None:
        self.buffered = 0
        self.early = 0


async def hydrate(cfg, root: Path, sessions: list[str], project_override: str | None) -> list[dict]:
    """Copy every file of each session from the stream under ``root``; summaries."""
    from sessiond.mirror import connect
    from sessiond.store.safeopen import StoreRoot

    nc = await connect(cfg, "sessiond-pull", forever=False)
    try:
        js = nc.jetstream(timeout=cfg.ack_timeout)
        with StoreRoot(root) as store:
            return [await _hydrate_one(js, cfg, store, sid, project_override) for sid in sessions]
    finally:
        await nc.close()


def place(msg, prefix: str, session: str) -> tuple[FileRef, int] | str:
    """Which file of ``session`` a message is a range of, and its offset; else
    why it is skipped. Every header is untrusted: it must name a transcript of
    this session, match the subject the message came on, and give a plain
    offset."""
    from sessiond.mirror.stream_format import HDR_FILE, HDR_OFFSET, HDR_PROJECT, parse_offset, parse_ref

    headers = msg.headers or {}
    ref = parse_ref(headers.get(HDR_PROJECT), headers.get(HDR_FILE))
    if ref is None:
        return f"its {HDR_PROJECT} and {HDR_FILE} headers do not name a transcript"
    if ref.session != session:
        return f"it is a range of {printable_name(ref.rel)}, not of session {session}"
    if ref.subject(prefix) != msg.subject:
        return f"its headers name {printable_name(ref.project)}/{printable_name(ref.rel)}, not the file of its subject"
    offset = parse_offset(headers.get(HDR_OFFSET))
    if offset is None:
        return f"its {HDR_OFFSET} {printable_name(headers.get(HDR_OFFSET, ''))!r} is not a byte offset"
    return ref, offset


async def _nothing_left(sub, timeout: float) -> bool:
    """Whether the stream has no more messages for a pull's consumer (those it
    counted were deleted); False when the server does not say."""
    import asyncio

    import nats.errors

    try:
        async with asyncio.timeout(timeout):
            info = await sub.consumer_info()
    except (TimeoutError, nats.errors.Error):
        return False
    return not info.num_pending


async def _hydrate_one(js, cfg, store: StoreRoot, session: str, project_override: str | None) -> dict:
    import nats.errors

    from sessiond.mirror.stream_format import session_filters
    from sessiond.store.paths import projects_dir

    key, project, pending, upto = await _newest_project(js, cfg, session)
    filters = session_filters(cfg.subject_prefix, session, key)
    budget = PullBudget()
    sinks: dict[str, FileSink] = {}  # the files still being pulled
    made: list[FileSink] = []
    problems: dict[str, str] = {}  # rel -> why that file is not (wholly) pulled
    messages = skipped = vanished = 0

    def skip(seq: int, why: str) -> None:
        nonlocal skipped
        skipped += 1
        if skipped <= SHOWN_SKIPS:
            echo(f"sessiond: {session}: message {seq} skipped: {why}", err=True)

    def failed(rel: str, exc: FileProblem | OSError) -> None:
        problems[rel] = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
        sink = sinks.pop(rel, None)
        if sink is not None:
            try:
                sink.whole_lines()
            except OSError as again:
                problems[rel] += f"; and cutting back its torn tail failed: {again}"

    def flush_all() -> None:
        for rel, sink in list(sinks.items()):
            try:
                sink.flush()
            except (FileProblem, OSError) as exc:
                failed(rel, exc)

    try:
        sub = await js.subscribe(filters[0], stream=cfg.stream, ordered_consumer=True, config=_consumer_config(filters))
        try:
            while pending:  # the count at the start, then what the server says is left (up to `upto`)
                try:
                    msg = await sub.next_msg(timeout=cfg.ack_timeout * 2)
                except nats.errors.TimeoutError:
                    if await _nothing_left(sub, cfg.ack_timeout):
                        vanished = pending  # deleted from the stream during the pull
                        break
                    raise SessiondError(
                        f"the mirror sent nothing for {cfg.ack_timeout * 2:g}s with {count(pending, 'message')} of {session} "
                        "left; the whole lines pulled so far are kept, pull again to go on", code="mirror_unavailable") from None
                messages += 1
                seq = msg.metadata.sequence.stream
                pending = msg.metadata.num_pending if seq < upto else 0
                placed = place(msg, cfg.subject_prefix, session)
                if isinstance(placed, str):
                    skip(seq, placed)
                    continue
                ref, start = placed
                if ref.rel in problems:
                    skipped += 1  # told once, with the file
                    continue
                sink = sinks.get(ref.rel)
                if sink is None and len(made) + len(problems) >= MAX_FILES:
                    skip(seq, f"the session already has {MAX_FILES} files")
                    continue
                try:
                    if sink is None:
                        dest = projects_dir(store.path) / (project_override or ref.project) / ref.rel
                        sink = sinks[ref.rel] = FileSink(store, dest, budget)
                        made.append(sink)
                    why = sink.add(start, msg.data)
                except (FileProblem, OSError) as exc:
                    failed(ref.rel, exc)
                    skipped += 1
                    continue
                if why is not None:
                    skip(seq, why)
                if budget.buffered >= FLUSH_BYTES:
                    flush_all()
        finally:
            await sub.unsubscribe()
        for rel, sink in list(sinks.items()):
            try:
                sink.finish()
                del sinks[rel]
            except (FileProblem, OSError) as exc:
                failed(rel, exc)
    finally:
        for sink in sinks.values():  # an error midway: no torn line of ours left behind
            try:
                sink.whole_lines()
            except OSError:
                pass
    for rel, why in problems.items():
        echo(f"sessiond: {session}: {printable_name(rel)}: {why}", err=True)
    done = [s for s in made if s.end]
    main = next((s for s in done if s.path.name == f"{session}.jsonl"), None)
    return {
        "sessionId": session,
        "project": project_override or project,
        "path": str(main.path) if main else None,
        "files": len(done),
        "messages": messages,
        "skipped": skipped,
        "vanished": vanished,
        "problems": len(problems),
        "bytesAdded": sum(s.added for s in done),
        "bytesPresent": sum(s.existing for s in done),
        "bytes": sum(s.end for s in done),
    }


def _consumer_config(filters: list[str]):
    from nats.js import api

    return api.ConsumerConfig(filter_subjects=filters, deliver_policy=api.DeliverPolicy.ALL)


async def _newest_project(js, cfg, session: str) -> tuple[str, str, int, int]:
    """(project key, project dir name, message count) of the project the session
    was last written under (a session continued on a machine with another cwd has
    a copy under each project), and the stream's last sequence then: what a pull
    reads up to, so one that another machine keeps writing to still ends."""
    from nats.js.errors import NotFoundError

    from sessiond.mirror.stream_format import HDR_PROJECT

    depth = len(cfg.subject_prefix.split("."))
    counts: dict[str, int] = {}
    mains: list[str] = []
    others: list[str] = []
    upto = 0
    for pattern in (f"{cfg.subject_prefix}.*.{session}", f"{cfg.subject_prefix}.*.{session}.>"):
        try:
            info = await js.stream_info(cfg.stream, subjects_filter=pattern)
        except NotFoundError:
            raise not_found(f"stream {cfg.stream} does not exist on {', '.join(cfg.servers)}") from None
        upto = max(upto, info.state.last_seq)
        for subject, n in (info.state.subjects or {}).items():
            key = subject.split(".")[depth]
            counts[key] = counts.get(key, 0) + n
            (mains if subject.count(".") == depth + 1 else others).append(subject)
    best: tuple[int, str, str] | None = None
    for subject in mains or others:
        try:
            msg = await js.get_last_msg(cfg.stream, subject)
        except NotFoundError:  # deleted meanwhile, or a subject name the server cannot be asked about
            continue
        if best is None or (msg.seq or 0) > best[0]:
            best = (msg.seq or 0, subject.split(".")[depth], (msg.headers or {}).get(HDR_PROJECT, ""))
    if best is None:
        raise not_found(f"session {session} is not in stream {cfg.stream}")
    return best[1], best[2], counts[best[1]], upto


def _where_the_mirror_is(f):
    """pull's and push's options naming the mirror (else the config file's)."""
    f = click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
                     help="Config file with the [mirror] section.")(f)
    return click.option("--server", "servers", multiple=True,
                        help="NATS URL (default: [mirror] servers of the config file).")(f)


@cli.command()
@click.argument("session_ids", metavar="ID...", nargs=-1, required=True)
@click.option("--cwd", default=None, help="Put it in this project's dir (default: the dir it was written in).")
@_where_the_mirror_is
@click.option("--timeout", type=Seconds(), default=120.0, show_default=True, help="Seconds for the whole pull.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session pulled, one per line.")
@click.pass_obj
def pull(obj: Context, session_ids: tuple[str, ...], cwd: str | None, servers: tuple[str, ...], config_path: Path | None,
         timeout: float, as_json: bool) -> None:
    """Hydrate sessions (subagent files included) from the mirror, byte-identical.

    What the stream holds that is not a range of the session's files is skipped,
    one line each on stderr; a local file that differs is kept as it is. Either
    makes the exit status 1."""
    from sessiond.store.paths import check_session_id, project_dir

    session_ids = tuple(check_session_id(sid) for sid in session_ids)
    cfg, root = _mirror_settings(obj, config_path, servers)
    override = project_dir(root, os.path.abspath(cwd)).name if cwd else None
    results = _run(hydrate(cfg, root, list(session_ids), override), timeout)
    incomplete = False
    for res in results:
        if as_json:
            echo_json(res)
        else:
            echo(f"pulled {res['sessionId']}: {count(res['files'], 'file')}, "
                 f"{size(res['bytesAdded'])} new, {size(res['bytesPresent'])} already here")
            if res["path"]:
                echo(f"  {res['path']}")
        gaps = shortfall(res)
        if gaps:
            echo(f"sessiond: {res['sessionId']}: not pulled whole: {gaps}", err=True)
            incomplete = True
    if incomplete:
        sys.exit(1)


def shortfall(res: dict) -> str | None:
    """What a pull's summary says it left out (skipped messages, files with a
    problem), or None when the session came whole."""
    parts = []
    if res["skipped"]:
        parts.append(f"{count(res['skipped'], 'message')} skipped")
    if res["vanished"]:
        parts.append(f"{count(res['vanished'], 'message')} deleted from the stream during the pull")
    if res["problems"]:
        parts.append(f"{count(res['problems'], 'file')} with a problem")
    return ", ".join(parts) or None


def hydrate_missing(obj: Context, session_id: str, timeout: float = 60.0) -> Path | None:
    """``show``/``resume`` of a session that is not local: pull it from the mirror
    when one is configured. None when no mirror is configured or the stream does
    not have it; a mirror that cannot be reached is an error saying so."""
    from sessiond.config import ConfigError, build

    try:
        settings = build({"root": str(obj.root) if obj.root else None})
    except ConfigError:
        return None
    if settings.mirror is None:
        return None
    cfg, root = _mirror_settings(obj, None, ())
    try:
        (res,) = _run(hydrate(cfg, root, [session_id], None), timeout)
    except SessiondError as exc:
        if exc.code == "not_found":
            return None
        raise
    gaps = shortfall(res)
    if gaps:
        raise SessiondError(f"{session_id}: the mirror's copy was not pulled whole: {gaps}", code="io_error")
    if res["path"]:
        echo(f"sessiond: pulled {session_id} from the mirror ({count(res['files'], 'file')})", err=True)
        return Path(res["path"])
    return None


# ------------------------------------------------------------------------ push


def session_files(root: Path, session: str, cwd: str | None) -> list[Path]:
    """The local files of a session: its transcript and every agent transcript."""
    from sessiond.mirror.stream_format import file_ref
    from sessiond.store.paths import projects_dir

    from .locate import find

    main = Path(find(root, session, cwd).path)
    agents = sorted((main.parent / session / "subagents").rglob("agent-*.jsonl"))
    files = []
    for p in [main, *agents]:
        if file_ref(projects_dir(root), p) is None:
            continue
        if not p.is_file():  # a FIFO or a device named like an agent file: never read (the mirror refuses it too)
            echo(f"sessiond: {p}: skipped, not a regular file", err=True)
            continue
        files.append(p)
    return files


async def backfill(cfg, root: Path, paths: list[Path], timeout: float) -> dict:
    import asyncio
    import logging

    from sessiond.mirror import Mirror

    logging.getLogger("sessiond").setLevel(logging.ERROR)  # the daemon's retry chatter: the outcome is reported
    mirror = Mirror(cfg, root, asyncio.get_running_loop(), name="sessiond-push", forever=False)
    for p in paths:
        mirror.track_existing(p)
    mirror.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(timeout, CONNECT_TIMEOUT)
    while not mirror.healthy and loop.time() < deadline:  # an unreachable server: fail fast
        if mirror.pump.nc is None and mirror.errors.count:  # every server refused the first connection
            break
        await asyncio.sleep(0.02)
    if not mirror.healthy:
        await mirror.close(0)
        raise SessiondError(f"cannot reach the mirror: {mirror.errors.last or 'no answer'}", code="mirror_unavailable")
    done = await mirror.wait_caught_up(timeout)
    st = mirror.status()
    await mirror.close(0)
    broken = [f"{f.path.name}: {f.broken}" for f in mirror.files.values() if f.broken]
    if broken:
        raise SessiondError("; ".join(broken), code="mirror_unavailable")
    if not done:
        raise SessiondError(f"not caught up within {timeout:g}s ({st['lagBytes']} bytes left): {st['lastError'] or 'no answer'}",
                            code="mirror_unavailable")
    return {"files": len(paths), "messages": st["published"], "bytesPublished": st["publishedBytes"]}


@cli.command()
@click.argument("session_id", metavar="ID|PATH", shell_complete=complete_session)
@click.option("--cwd", default=None, help="Project directory to look in first (default: the current directory).")
@_where_the_mirror_is
@click.option("--timeout", type=Seconds(), default=120.0, show_default=True, help="Seconds for the whole push.")
@click.option("--json", "as_json", is_flag=True, help="What was published as one JSON object.")
@click.pass_obj
def push(obj: Context, session_id: str, cwd: str | None, servers: tuple[str, ...], config_path: Path | None, timeout: float, as_json: bool) -> None:
    """Backfill a local session into the mirror (only what the stream lacks)."""
    from .locate import session_id as resolved_id

    session_id = resolved_id(obj, session_id)
    cfg, root = _mirror_settings(obj, config_path, servers)
    paths = session_files(root, session_id, cwd)
    res = _run(backfill(cfg, root, paths, timeout), timeout + 5)
    res["sessionId"] = session_id
    if as_json:
        echo_json(res)
    else:
        echo(f"pushed {session_id}: {count(res['files'], 'file')}, "
             f"{size(res['bytesPublished'])} published")
    sys.stdout.flush()
