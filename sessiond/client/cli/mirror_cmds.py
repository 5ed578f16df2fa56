"""pull and push: a session through the NATS JetStream mirror (see sessiond/mirror/).

Both talk to NATS from this process with the daemon's own ``[mirror]`` settings
(the same config file), so they work with no daemon running and need no new
request on the socket.

``pull ID`` hydrates the session's files, subagent files included, from the
stream: every message is a byte range with its file offset, so each range is put
exactly where it was in the source and the copy is byte-identical. Ranges already
present (a resend, or a file pulled before) are compared, not written twice; a
local file that differs from the stream is an error, as is a hole in the stream.
Appends go under the writers' ``flock`` and check the file did not grow meanwhile,
so a pull never interleaves with a daemon or fallback writer.

``push ID`` backfills a local session: for each file the stream is asked where
its copy ends, and the rest is published (the daemon does the same for any file
it writes; push covers sessions nobody writes any more).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from sessiond.wire.errors import SessiondError, not_found

from . import Context, cli
from .completion import complete_session
from .group import Seconds
from .output import count, echo, echo_json, printable_name, shell_word, size

FLUSH_BYTES = 4 * 1024 * 1024
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


class FileSink:
    """One local file rebuilt from ranges: appends what extends it, checks what
    overlaps it, holds what comes early (a range resent out of order)."""

    def __init__(self, path: Path) -> None:
        from sessiond.store.appendfile import ends_torn, open_append

        self.path = path
        self.fd, self.created = open_append(path)
        self.flushed = os.fstat(self.fd).st_size
        if ends_torn(self.fd, self.flushed):
            raise SessiondError(f"{printable_name(str(path))} ends in a torn line; run `sessiond repair {shell_word(str(path))}` first",
                                code="io_error")
        self.existing = self.flushed
        self.end = self.flushed
        self.buf: list[bytes] = []
        self.early: dict[int, bytes] = {}
        self.added = 0

    def add(self, start: int, data: bytes) -> None:
        if start > self.end:
            if len(data) > len(self.early.get(start, b"")):
                self.early[start] = data
            return
        if start < self.end:
            overlap = min(len(data), self.end - start)
            self._check(start, data[:overlap])
            data = data[overlap:]
            start += overlap
        if data:
            self.buf.append(data)
            self.end += len(data)
            self.added += len(data)
            if self.end - self.flushed >= FLUSH_BYTES:
                self.flush()
        while self.early:
            ready = [s for s in self.early if s <= self.end]
            if not ready:
                break
            for s in ready:
                self.add(s, self.early.pop(s))

    def _check(self, start: int, expected: bytes) -> None:
        self.flush()
        if os.pread(self.fd, len(expected), start) != expected:
            raise SessiondError(
                f"{self.path} differs from the mirror's copy at offset {start}: "
                "the local session and the remote one diverged; move one aside to pull", code="io_error"
            )

    def flush(self) -> None:
        if not self.buf:
            return
        from sessiond.store.appendfile import file_lock, write_all

        data = b"".join(self.buf)
        with file_lock(self.fd):
            now = os.fstat(self.fd).st_size
            if now != self.flushed:
                raise SessiondError(f"{self.path} was written to during the pull (at {now} bytes, expected {self.flushed})", code="io_error")
            write_all(self.fd, data)
        self.flushed += len(data)
        self.buf = []

    def finish(self) -> None:
        self.flush()
        try:
            if self.early:
                hole = min(self.early)
                raise SessiondError(
                    f"the stream's copy of {self.path.name} has a hole at bytes {self.end}-{hole}", code="io_error"
                )
            if self.end and os.pread(self.fd, 1, self.end - 1) != b"\n":
                raise SessiondError(f"the stream's copy of {self.path.name} ends inside a line (at {self.end})", code="io_error")
            os.fsync(self.fd)
        finally:
            os.close(self.fd)


async def hydrate(cfg, root: Path, sessions: list[str], project_override: str | None) -> list[dict]:
    """Copy every file of each session from the stream under ``root``; summaries."""
    from sessiond.mirror import connect

    nc = await connect(cfg, "sessiond-pull", forever=False)
    try:
        js = nc.jetstream(timeout=cfg.ack_timeout)
        return [await _hydrate_one(js, cfg, root, sid, project_override) for sid in sessions]
    finally:
        await nc.close()


async def _hydrate_one(js, cfg, root: Path, session: str, project_override: str | None) -> dict:
    from sessiond.mirror.stream_format import HDR_FILE, HDR_OFFSET, HDR_PROJECT, parse_ref, session_filters
    from sessiond.store.paths import check_inside, projects_dir

    key, project, pending = await _newest_project(js, cfg, session)
    filters = session_filters(cfg.subject_prefix, session, key)
    sinks: dict[str, FileSink] = {}
    messages = 0
    try:
        sub = await js.subscribe(filters[0], stream=cfg.stream, ordered_consumer=True, config=_consumer_config(filters))
        try:
            while pending:  # the count at the start, then what the server says is left
                msg = await sub.next_msg(timeout=cfg.ack_timeout * 2)
                headers = msg.headers or {}
                ref = parse_ref(headers.get(HDR_PROJECT), headers.get(HDR_FILE))
                if ref is None or ref.session != session:
                    raise SessiondError(f"message {msg.metadata.sequence.stream} of the stream is not a sessiond range", code="io_error")
                sink = sinks.get(ref.rel)
                if sink is None:
                    dest = check_inside(root, projects_dir(root) / (project_override or ref.project) / ref.rel)
                    sink = sinks[ref.rel] = FileSink(dest)
                sink.add(int(headers.get(HDR_OFFSET, "0")), msg.data)
                messages += 1
                pending = msg.metadata.num_pending
        finally:
            await sub.unsubscribe()
        done = []
        while sinks:
            done.append(sinks.pop(next(iter(sinks))))
            done[-1].finish()
    finally:
        for sink in sinks.values():  # an error midway: release the descriptors
            try:
                os.close(sink.fd)
            except OSError:
                pass
    main = next((s for s in done if s.path.name == f"{session}.jsonl"), None)
    return {
        "sessionId": session,
        "project": project_override or project,
        "path": str(main.path) if main else None,
        "files": len(done),
        "messages": messages,
        "bytesAdded": sum(s.added for s in done),
        "bytesPresent": sum(s.existing for s in done),
        "bytes": sum(s.end for s in done),
    }


def _consumer_config(filters: list[str]):
    from nats.js import api

    return api.ConsumerConfig(filter_subjects=filters, deliver_policy=api.DeliverPolicy.ALL)


async def _newest_project(js, cfg, session: str) -> tuple[str, str, int]:
    """(project key, project dir name, message count) of the project the session
    was last written under (a session continued on a machine with another cwd has
    a copy under each project)."""
    from nats.js.errors import NotFoundError

    from sessiond.mirror.stream_format import HDR_PROJECT

    depth = len(cfg.subject_prefix.split("."))
    counts: dict[str, int] = {}
    mains: list[str] = []
    others: list[str] = []
    for pattern in (f"{cfg.subject_prefix}.*.{session}", f"{cfg.subject_prefix}.*.{session}.>"):
        try:
            info = await js.stream_info(cfg.stream, subjects_filter=pattern)
        except NotFoundError:
            raise not_found(f"stream {cfg.stream} does not exist on {', '.join(cfg.servers)}") from None
        for subject, n in (info.state.subjects or {}).items():
            key = subject.split(".")[depth]
            counts[key] = counts.get(key, 0) + n
            (mains if subject.count(".") == depth + 1 else others).append(subject)
    best: tuple[int, str, str] | None = None
    for subject in mains or others:
        msg = await js.get_last_msg(cfg.stream, subject)
        if best is None or (msg.seq or 0) > best[0]:
            best = (msg.seq or 0, subject.split(".")[depth], (msg.headers or {}).get(HDR_PROJECT, ""))
    if best is None:
        raise not_found(f"session {session} is not in stream {cfg.stream}")
    return best[1], best[2], counts[best[1]]


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
    """Hydrate sessions (subagent files included) from the mirror, byte-identical."""
    from sessiond.store.paths import check_session_id, project_dir

    session_ids = tuple(check_session_id(sid) for sid in session_ids)
    cfg, root = _mirror_settings(obj, config_path, servers)
    override = project_dir(root, os.path.abspath(cwd)).name if cwd else None
    results = _run(hydrate(cfg, root, list(session_ids), override), timeout)
    for res in results:
        if as_json:
            echo_json(res)
            continue
        echo(f"pulled {res['sessionId']}: {count(res['files'], 'file')}, "
             f"{size(res['bytesAdded'])} new, {size(res['bytesPresent'])} already here")
        if res["path"]:
            echo(f"  {res['path']}")


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
