"""The ``sessiond`` command line: human output by default, ``--json`` for programs.

Every expected failure is one line on stderr and a non-zero exit, never a
traceback. ``status`` and ``stop`` never start a daemon; the other commands
autostart one unless ``--no-autostart`` (or SESSIOND_NO_AUTOSTART=1) is given, in
which case ``append`` falls back to writing the files directly.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import click
import msgspec

from sessiond.protocol.locations import default_root, default_socket
from sessiond.protocol.wire import messages as m
from sessiond.protocol.wire.errors import DaemonUnavailable, SessiondError

BATCH_ENTRIES = 256
BATCH_BYTES = 4 * 1024 * 1024


class Context(msgspec.Struct):
    root: Path | None
    socket: Path
    autostart: bool
    socket_given: bool = False

    def client(self, autostart: bool | None = None):
        from .connection import Client

        return Client(self.socket, root=self.root, autostart=self.autostart if autostart is None else autostart, name="sessiond-cli")


class CLI(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SessiondError as exc:
            click.echo(f"sessiond: {exc}", err=True)
            ctx.exit(1)
        except (OSError, ValueError) as exc:
            click.echo(f"sessiond: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=CLI, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", type=click.Path(path_type=Path), envvar="SESSIOND_ROOT", help="Store root (default ~/.local/share/sessiond).")
@click.option("--socket", "socket_path", type=click.Path(path_type=Path), envvar="SESSIOND_SOCKET", help="Daemon socket path.")
@click.option("--no-autostart", is_flag=True, envvar="SESSIOND_NO_AUTOSTART", help="Never start a daemon on demand.")
@click.version_option(package_name="sessiond")
@click.pass_context
def cli(ctx: click.Context, root: Path | None, socket_path: Path | None, no_autostart: bool) -> None:
    """sessiond: one daemon that owns every AI-agent transcript file."""
    ctx.obj = Context(
        root=root.absolute() if root else None,
        socket=(socket_path or default_socket()).absolute(),
        autostart=not no_autostart,
        socket_given=socket_path is not None,
    )


# ------------------------------------------------------------------------ daemon


@cli.command()
@click.option("--flush-interval", type=click.FloatRange(min=0, max=60_000), default=None, help="Coalescing window in ms (default 100).")
@click.option("--fsync", type=click.Choice(["never", "interval", "always"]), default=None, help="fsync policy (default interval).")
@click.option("--max-frame", type=click.IntRange(min=1024), default=None, help="Largest accepted frame in bytes.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None, help="Default info.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None, help="Config file (default $XDG_CONFIG_HOME/sessiond/config.toml).")
@click.pass_obj
def serve(obj: Context, flush_interval: float | None, fsync: str | None, max_frame: int | None, log_level: str | None, config_path: Path | None) -> None:
    """Run the daemon in the foreground (flags > env > config file > defaults)."""
    from sessiond.daemon.config import ConfigError, build
    from sessiond.daemon.server import serve as run

    flags = {
        "root": str(obj.root) if obj.root else None,
        "socket": str(obj.socket) if obj.socket_given else None,
        "flush_interval_ms": flush_interval,
        "fsync": fsync,
        "max_frame_bytes": max_frame,
        "log_level": log_level,
    }
    try:
        settings = build(flags, config_path)
    except ConfigError as exc:
        click.echo(f"sessiond: config: {exc}", err=True)
        sys.exit(2)
    sys.exit(run(settings, flags))


@cli.command()
@click.pass_obj
def start(obj: Context) -> None:
    """Start the daemon in the background (no-op when one runs)."""
    from .autostart import socket_answers, start_daemon

    if socket_answers(obj.socket):
        with obj.client(autostart=False) as c:
            click.echo(f"sessiond already running (pid {c.daemon_pid}) on {obj.socket}")
        return
    start_daemon(obj.socket, obj.root)
    with obj.client(autostart=False) as c:
        click.echo(f"sessiond started (pid {c.daemon_pid}) on {obj.socket}")


@cli.command()
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the daemon to exit.")
@click.pass_obj
def stop(obj: Context, timeout: float) -> None:
    """Stop the daemon: it drains every queue first. Never starts one."""
    try:
        client = obj.client(autostart=False).connect()
    except DaemonUnavailable:
        click.echo("sessiond: no daemon running", err=True)
        return
    pid = client.daemon_pid
    client.shutdown()
    client.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid is None or not _alive(pid):
            click.echo(f"sessiond stopped (pid {pid})")
            return
        time.sleep(0.02)
    raise DaemonUnavailable(f"the daemon (pid {pid}) did not exit within {timeout:.0f}s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(obj: Context, as_json: bool) -> None:
    """Show the running daemon's figures; exit 1 when none runs."""
    try:
        with obj.client(autostart=False) as c:
            st = c.status()
    except DaemonUnavailable as exc:
        if as_json:
            click.echo(msgspec.json.encode({"running": False, "socket": str(obj.socket), "error": str(exc)}))
        else:
            click.echo(f"sessiond: not running ({exc})", err=True)
        sys.exit(1)
    data = msgspec.to_builtins(st)
    data.pop("op", None)
    data.pop("id", None)
    if as_json:
        click.echo(msgspec.json.encode({"running": True, **data}))
        return
    cfg = st.config
    click.echo(f"sessiond {st.version}: pid {st.pid}, up {_duration(st.uptime)}")
    click.echo(f"  socket    {st.socket}")
    click.echo(f"  root      {st.root}")
    click.echo(f"  sessions  {st.sessions} open ({st.materialized} with files), {st.clients} clients")
    click.echo(f"  queued    {st.queuedEntries} entries, {_size(st.queuedBytes)}; {st.pendingEntries} pending before materialization")
    click.echo(f"  written   {st.writes} writes, {_size(st.bytesWritten)}, {st.fsyncs} fsyncs, {st.errors} errors")
    click.echo(f"  config    flush interval {cfg.get('flushIntervalMs')} ms, fsync {cfg.get('fsync')}")


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


@cli.command()
@click.option("--session", default=None, help="Only this session's files.")
@click.option("--durable", is_flag=True, help="Also fdatasync what was written.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def flush(obj: Context, session: str | None, durable: bool, as_json: bool) -> None:
    """Wait until everything accepted so far is written (and synced with --durable)."""
    with obj.client() as c:
        res = c.flush(session, durable=durable)
    if as_json:
        click.echo(msgspec.json.encode({"files": res.files, "durable": durable}))
    else:
        click.echo(f"flushed {res.files} file{'s' if res.files != 1 else ''}{' (synced)' if durable else ''}")


# ----------------------------------------------------------------------- writing


class EntryReader:
    """Non-blank lines of the input that are single JSON objects; any other line
    is reported on stderr with its number, counted in ``skipped`` and left out."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.skipped = 0

    def __iter__(self) -> Iterator[bytes]:
        from sessiond.protocol.transcript.entries import decode_header

        for number, raw in enumerate(self.stream, 1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                decode_header(line)
            except SessiondError as exc:
                click.echo(f"sessiond: line {number} skipped: {exc}", err=True)
                self.skipped += 1
                continue
            yield line


def _batches(lines: Iterator[bytes]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line)
        if len(batch) >= BATCH_ENTRIES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


@cli.command()
@click.option("--cwd", required=True, help="The session's working directory (absolute).")
@click.option("--session", required=True, help="Session id (a UUID).")
@click.option("--agent", default=None, help="Route every entry to this agent's transcript.")
@click.option("--run", default=None, help="Workflow run id of the agent.")
@click.option("--durability", type=click.Choice(list(m.DURABILITIES)), default="queued", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.argument("source", type=click.File("rb"), default="-")
@click.pass_obj
def append(obj: Context, cwd: str, session: str, agent: str | None, run: str | None, durability: str, as_json: bool, source: IO[bytes]) -> None:
    """Store raw entries (one JSON object per line) from SOURCE or stdin."""
    from sessiond.protocol.transcript.paths import check_cwd, check_session_id

    check_cwd(cwd)
    check_session_id(session)
    lines = EntryReader(source)
    accepted = duplicates = 0
    client = obj.client()
    try:
        client.connect()
    except DaemonUnavailable as exc:
        from sessiond.protocol.locations import daemon_holds_lock

        if obj.autostart or daemon_holds_lock(obj.socket):
            raise
        from .fallback import direct_append

        res = direct_append(obj.root or default_root(), cwd, session, list(lines), agent=agent, run=run)
        click.echo(f"sessiond: {exc}; wrote directly to the files", err=True)
        _report(as_json, session, res.written, res.duplicates, lines.skipped, direct=True, dropped=res.dropped)
        return
    with client:
        reqs = (
            m.Append(id=client.next_id(), session=session, cwd=cwd, entries=batch, durability=durability, agent=agent, run=run)  # type: ignore[arg-type]
            for batch in _batches(iter(lines))
        )
        for resp in client.pipeline(reqs, window=16):
            if isinstance(resp, m.Error):
                raise SessiondError(resp.message, code=resp.code)
            assert isinstance(resp, m.Appended)
            accepted += resp.accepted
            duplicates += resp.duplicates
        client.call(m.Close(id=client.next_id(), session=session))
    _report(as_json, session, accepted, duplicates, lines.skipped)


def _report(as_json: bool, session: str, accepted: int, duplicates: int, skipped: int, *, direct: bool = False, dropped: int = 0) -> None:
    if as_json:
        out: dict[str, Any] = {"session": session, "accepted": accepted, "duplicates": duplicates, "skipped": skipped}
        if direct:
            out["direct"] = True
            out["dropped"] = dropped
        click.echo(msgspec.json.encode(out))
        return
    note = f"{duplicates} duplicate{'s' if duplicates != 1 else ''} dropped"
    if skipped:
        note += f", {skipped} invalid line{'s' if skipped != 1 else ''} skipped"
    if dropped:
        note += f", {dropped} entries without a message not written"
    click.echo(f"{accepted} entries {'written' if direct else 'accepted'} for session {session} ({note})")


@cli.command()
@click.option("--cwd", required=True, help="The session's working directory (absolute).")
@click.option("--session", required=True, help="Session id (a UUID).")
@click.option("--agent", default=None, help="Record into this agent's (sidechain) transcript.")
@click.option("--parent", default=None, help="Chain after this uuid instead of the session's last message.")
@click.option("--durability", type=click.Choice(list(m.DURABILITIES)), default="queued", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.argument("source", type=click.File("rb"), default="-")
@click.pass_obj
def record(obj: Context, cwd: str, session: str, agent: str | None, parent: str | None, durability: str, as_json: bool, source: IO[bytes]) -> None:
    """Record messages (one JSON object per line), chaining their parents (SPEC 3.1)."""
    from sessiond.protocol.transcript.paths import check_cwd, check_session_id

    from .session import Session

    check_cwd(cwd)
    check_session_id(session)
    lines = EntryReader(source)
    with obj.client() as client:
        s = Session(client, session, cwd, agent=agent, durability=durability)  # type: ignore[arg-type]
        s.hint = parent
        for batch in _batches(iter(lines)):
            s.record([msgspec.json.decode(line) for line in batch])
        s.close()
    if as_json:
        click.echo(msgspec.json.encode({"session": session, "recorded": s.accepted, "duplicates": s.duplicates, "last": s.hint, "skipped": lines.skipped}))
    else:
        click.echo(f"{s.accepted} messages recorded in session {session} ({s.duplicates} already there); last {s.hint}")


# ----------------------------------------------------------------------- reading


@cli.command("list")
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--all", "all_projects", is_flag=True, help="Sessions of every project.")
@click.option("--worktrees", is_flag=True, help="Include the sessions of the repository's other git worktrees.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N sessions (newest first).")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="Skip the K newest sessions.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of session objects.")
@click.pass_obj
def list_cmd(obj: Context, cwd: str | None, all_projects: bool, worktrees: bool, limit: int | None, offset: int, as_json: bool) -> None:
    """List sessions, newest first, reading only what the page needs."""
    from sessiond.protocol.transcript import listing, lookup
    from sessiond.protocol.transcript.paths import check_cwd

    root = obj.root or default_root()
    progress = None
    if sys.stderr.isatty():
        progress = Progress.callback("reading sessions")
    if all_projects:
        sessions = listing.list_all_sessions(root, limit=limit, offset=offset, progress=progress)
    else:
        where = os.path.abspath(cwd) if cwd else os.getcwd()
        check_cwd(where)
        dirs = lookup.listing_dirs(root, where, worktrees=worktrees)
        sessions = listing.list_sessions(dirs, limit=limit, offset=offset, progress=progress) if dirs else []
    if progress is not None:
        progress.finish()
    if as_json:
        click.echo(msgspec.json.encode(sessions))
        return
    if not sessions:
        click.echo("no sessions" + ("" if all_projects else f" for {cwd or os.getcwd()}"), err=True)
        return
    now = time.time()
    rows = [(_clip(s.title or "(untitled)", 60), _age(now, s.modifiedAt), _size(s.size), _clip(s.gitBranch or "-", 20), s.sessionId) for s in sessions]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        click.echo(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:<{widths[3]}}  {r[4]}")


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _age(now: float, iso: str | None) -> str:
    from datetime import datetime

    if not iso:
        return "?"
    try:
        then = datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "?"
    secs = max(0, int(now - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit} ago"
    return "just now"


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per file, one per line.")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, dir_okay=True, path_type=Path))
@click.pass_obj
def check(obj: Context, as_json: bool, paths: tuple[Path, ...]) -> None:
    """Report damage in transcripts (default: every one under the root).

    Exit 0 when every file is healthy, 1 when any is not."""
    from sessiond.protocol.transcript.health import check_file

    files = _transcripts(paths or ((obj.root or default_root()) / "projects",))
    progress = Progress(len(files), "checking")
    unhealthy = 0
    for path in files:
        progress.step()
        try:
            h = check_file(path)
        except OSError as exc:
            click.echo(f"sessiond: {path}: {exc.strerror or exc}", err=True)
            unhealthy += 1
            continue
        unhealthy += not h.healthy
        if as_json:
            click.echo(msgspec.json.encode(h))
        elif not h.healthy or len(files) == 1:
            click.echo(_health_line(h))
    progress.done()
    if not as_json:
        click.echo(f"{len(files)} files checked, {unhealthy} unhealthy")
    sys.exit(1 if unhealthy else 0)


def _health_line(h) -> str:
    problems = []
    if h.tornTail:
        problems.append("torn last line")
    if h.unparseableLines:
        problems.append(f"unparseable lines {', '.join(map(str, h.unparseableLines[:10]))}")
    if h.duplicateUuids:
        problems.append(f"{len(h.duplicateUuids)} duplicate uuids")
    if h.danglingParents:
        problems.append(f"{len(h.danglingParents)} dangling parents")
    info = f"{h.lines} lines"
    if h.unansweredToolUses:
        info += f", {len(h.unansweredToolUses)} unanswered tool uses"
    return f"{'ok  ' if h.healthy else 'BAD '} {h.path}: {info}" + (f"; {'; '.join(problems)}" if problems else "")


def _transcripts(paths) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(p.rglob("*.jsonl"))
        elif p.exists():
            out.append(p)
    return out


class Progress:
    """A one-line counter on stderr for long runs (a few thousand files and more),
    only when stderr is a terminal."""

    THRESHOLD = 2000

    def __init__(self, total: int, what: str) -> None:
        self.total = total
        self.what = what
        self.n = 0
        self.shown = False
        self.on = sys.stderr.isatty()

    def update(self, done: int, total: int) -> None:
        self.n, self.total = done, total
        if self.on and total >= self.THRESHOLD and (done % 200 == 0 or done == total):
            self.shown = True
            click.echo(f"\r{self.what} {done}/{total}", err=True, nl=False)

    def step(self) -> None:
        self.update(self.n + 1, self.total)

    def done(self) -> None:
        if self.shown:
            click.echo("\r" + " " * 40 + "\r", err=True, nl=False)

    finish = done

    @classmethod
    def callback(cls, what: str) -> "Progress":
        return cls(0, what)

    def __call__(self, done: int, total: int) -> None:
        self.update(done, total)


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_obj
def repair(obj: Context, as_json: bool, path: Path) -> None:
    """Fix what can be fixed without losing a byte (a torn tail goes to FILE.torn).

    Safe while the daemon runs (it takes the same lock). Exit 0 when the file is
    healthy afterwards, 1 when problems remain that repair cannot fix."""
    from sessiond.protocol.transcript.health import repair_file

    r = repair_file(path)
    if as_json:
        click.echo(msgspec.json.encode(r))
    else:
        if r.movedTornTail is not None:
            t = r.movedTornTail
            click.echo(f"moved a torn last line ({t.length} bytes at offset {t.offset}) to {path}.torn")
        elif r.completedLastLine:
            click.echo("added the missing newline after the last line")
        else:
            click.echo("nothing to repair")
        click.echo(_health_line(r.remaining))
    sys.exit(0 if r.remaining.healthy else 1)


@cli.command("install-service")
@click.option("--systemd", "kind", flag_value="systemd", help="systemd user units (default on Linux).")
@click.option("--launchd", "kind", flag_value="launchd", help="A launchd user agent (default on macOS).")
@click.option("--print", "print_only", is_flag=True, help="Print the files instead of writing them.")
@click.pass_obj
def install_service(obj: Context, kind: str | None, print_only: bool) -> None:
    """Write the service files for the current user, with this executable's path."""
    from . import service

    kind = kind or ("launchd" if sys.platform == "darwin" else "systemd")
    exe = service.executable()
    if kind == "systemd":
        files = {service.systemd_dir() / name: text.encode() for name, text in service.systemd_units(exe).items()}
        enable = "systemctl --user daemon-reload && systemctl --user enable --now sessiond.socket"
    else:
        files = {service.launchd_path(): service.launchd_plist(exe, str(obj.socket))}
        enable = f"launchctl bootstrap gui/{os.getuid()} {service.launchd_path()}"
    for path, data in files.items():
        if print_only:
            click.echo(f"# {path}")
            click.echo(data.decode(), nl=False)
            click.echo()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        click.echo(f"wrote {path}")
    if not print_only:
        click.echo(f"enable it with: {enable}")


def main() -> None:
    cli(prog_name="sessiond")


if __name__ == "__main__":
    main()
