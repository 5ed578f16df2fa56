"""Commands about the daemon itself: serve, start, stop, status, flush, install-service."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from sessiond.wire.errors import DaemonUnavailable, SessiondError, UnsafeSocketDir

from . import Context, cli
from .group import Seconds
from .output import count, echo, echo_json


@cli.command()
@click.option("--flush-interval", type=click.FloatRange(min=0, max=60_000), default=None, help="Coalescing window in ms (default 100).")
@click.option("--fsync", type=click.Choice(["never", "interval", "always"]), default=None, help="fsync policy (default interval).")
@click.option("--max-frame", type=click.IntRange(min=1024), default=None, help="Largest accepted frame in bytes.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None, help="Default info.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
              help="Config file (default $XDG_CONFIG_HOME/sessiond/config.toml).")
@click.option("--root", "root_here", type=click.Path(path_type=Path), default=None, help="Store root (same as the global --root).")
@click.option("--socket", "socket_here", type=click.Path(path_type=Path), default=None, help="Socket path (same as the global --socket).")
@click.pass_obj
def serve(obj: Context, flush_interval: float | None, fsync: str | None, max_frame: int | None, log_level: str | None, config_path: Path | None,
          root_here: Path | None, socket_here: Path | None) -> None:
    """Run the daemon in the foreground (flags > env > config file > defaults)."""
    if root_here is not None:
        obj.root = root_here.absolute()
    if socket_here is not None:
        obj.socket, obj.socket_given = socket_here.absolute(), True
    from sessiond.config import ConfigError, build
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
        echo(f"sessiond: config: {exc}", err=True)
        sys.exit(2)
    sys.exit(run(settings, flags))


@cli.command()
@click.pass_obj
def start(obj: Context) -> None:
    """Start the daemon in the background (no-op when one runs)."""
    from ..autostart import socket_answers, start_daemon

    if socket_answers(obj.socket):
        with obj.client(autostart=False) as c:
            echo(f"sessiond already running (pid {c.daemon_pid}) on {obj.socket}")
        return
    start_daemon(obj.socket, obj.root)
    with obj.client(autostart=False) as c:
        echo(f"sessiond started (pid {c.daemon_pid}) on {obj.socket}")


@cli.command()
@click.option("--timeout", type=Seconds(), default=30.0, show_default=True, help="Seconds to wait for the daemon to exit.")
@click.pass_obj
def stop(obj: Context, timeout: float) -> None:
    """Stop the daemon: it drains every queue first. Never starts one."""
    try:
        client = obj.client(autostart=False, other_root_ok=True).connect()  # the daemon on this socket, whatever it serves
    except UnsafeSocketDir:
        raise  # not "no daemon": the directory is someone else's (one line, exit 1)
    except DaemonUnavailable:
        echo("sessiond: no daemon running", err=True)
        return
    pid = client.daemon_pid
    client.shutdown()
    client.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid is None or not _alive(pid):
            echo(f"sessiond stopped (pid {pid})")
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
    from .status_report import report_status

    report_status(obj, as_json)


@cli.command()
@click.option("--session", default=None, help="Only this session's files.")
@click.option("--durable", is_flag=True, help="Also fdatasync what was written.")
@click.option("--json", "as_json", is_flag=True, help="The count of files flushed as one JSON object.")
@click.pass_obj
def flush(obj: Context, session: str | None, durable: bool, as_json: bool) -> None:
    """Wait until everything accepted so far is written (and synced with --durable)."""
    with obj.client() as c:
        res = c.flush(session, durable=durable)
    if as_json:
        echo_json({"files": res.files, "durable": durable})
    else:
        echo(f"flushed {count(res.files, 'file')}{' (synced)' if durable else ''}")


def _service_files(obj: Context, kind: str) -> dict[Path, bytes]:
    """What install-service writes: the units for this store and socket."""
    from .. import service

    exe = service.executable()
    root = str(obj.root) if obj.root else None
    if kind == "launchd":
        return {service.launchd_path(): service.launchd_plist(exe, str(obj.socket), root)}
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    generic = runtime is not None and obj.socket == Path(runtime) / "sessiond" / "sessiond.sock"
    units = service.systemd_units(exe, root, None if generic else str(obj.socket))
    return {service.systemd_dir() / name: text.encode() for name, text in units.items()}


def _service_kind(kind: str | None) -> str:
    return kind or ("launchd" if sys.platform == "darwin" else "systemd")


@cli.command("install-service")
@click.option("--systemd", "kind", flag_value="systemd", help="systemd user units (default on Linux).")
@click.option("--launchd", "kind", flag_value="launchd", help="A launchd user agent (default on macOS).")
@click.option("--print", "print_only", is_flag=True, help="Print the files instead of writing them.")
@click.pass_obj
def install_service(obj: Context, kind: str | None, print_only: bool) -> None:
    """Write the service files for this user: this executable, store and socket."""
    from .. import service

    kind = _service_kind(kind)
    files = _service_files(obj, kind)
    if kind == "systemd":
        enable = "systemctl --user daemon-reload && systemctl --user enable --now sessiond.socket"
    else:
        enable = f"launchctl bootstrap gui/{os.getuid()} {service.launchd_path()}"
    for path, data in files.items():
        if print_only:
            echo(f"# {path}")
            echo(data.decode(), nl=False)
            echo()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        echo(f"wrote {path}")
    if not print_only:
        echo(f"enable it with: {enable}")


@cli.command("uninstall-service")
@click.option("--systemd", "kind", flag_value="systemd", help="The systemd user units (default on Linux).")
@click.option("--launchd", "kind", flag_value="launchd", help="The launchd user agent (default on macOS).")
@click.pass_obj
def uninstall_service(obj: Context, kind: str | None) -> None:
    """Remove the service files install-service wrote (transcripts are untouched).

    Refuses while the units are enabled: disable them first (the command is
    printed), so systemd is never left pointing at missing files."""
    from .. import service

    kind = _service_kind(kind)
    if kind == "systemd" and service.enabled_links():
        raise SessiondError("the units are enabled; first run: systemctl --user disable --now sessiond.socket sessiond.service",
                            code="bad_request")
    removed = 0
    for path in _service_files(obj, kind):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
        echo(f"removed {path}")
    if not removed:
        echo("no service files installed", err=True)
    elif kind == "systemd":
        echo("then: systemctl --user daemon-reload")
    else:
        echo(f"if it is still loaded: launchctl bootout gui/{os.getuid()}/{service.LAUNCHD_LABEL}")
