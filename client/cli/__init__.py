"""The ``sessiond`` command line: human output by default, ``--json`` for programs.

Every expected failure is one line on stderr and a non-zero exit, never a
traceback. ``status``, ``stop`` and the reading commands never start a daemon;
the writing commands autostart one unless ``--no-autostart`` (or
SESSIOND_NO_AUTOSTART=1) is given, in which case ``append`` falls back to writing
the files directly. Commands live in small modules by what they touch: the
daemon's lifecycle, writing, reading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import msgspec

from sessiond.protocol.locations import default_socket
from sessiond.protocol.wire.errors import SessiondError


class Context(msgspec.Struct):
    root: Path | None
    socket: Path
    autostart: bool
    socket_given: bool = False
    timeout: float | None = None

    def client(self, autostart: bool | None = None):
        from ..connection import DEFAULT_TIMEOUT, Client

        return Client(self.socket, root=self.root, autostart=self.autostart if autostart is None else autostart, name="sessiond-cli",
                      timeout=self.timeout or DEFAULT_TIMEOUT)


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
@click.option("--timeout", type=click.FloatRange(min=0.1), envvar="SESSIOND_TIMEOUT", default=None,
              help="Seconds to wait for the daemon's answer (default 30).")
@click.version_option(package_name="sessiond")
@click.pass_context
def cli(ctx: click.Context, root: Path | None, socket_path: Path | None, no_autostart: bool, timeout: float | None) -> None:
    """sessiond: one daemon that owns every AI-agent transcript file."""
    ctx.obj = Context(
        root=root.absolute() if root else None,
        socket=(socket_path or default_socket()).absolute(),
        autostart=not no_autostart,
        socket_given=socket_path is not None,
        timeout=timeout,
    )


def main() -> None:
    cli(prog_name="sessiond")


from . import daemon_cmds, lifecycle_cmds, mirror_cmds, read_cmds, resume_cmds, transfer_cmds, write_cmds  # noqa: E402,F401  (register the commands)
