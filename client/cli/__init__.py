"""The ``sessiond`` command line: human output by default, ``--json`` for programs.

Every expected failure is one line on stderr and a non-zero exit, never a
traceback. ``status``, ``stop`` and the reading commands never start a daemon;
the writing commands autostart one unless ``--no-autostart`` (or
SESSIOND_NO_AUTOSTART=1) is given, in which case ``append`` falls back to writing
the files directly. Commands live in small modules by what they touch: the
daemon's lifecycle, writing, reading.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import click

from sessiond.protocol.locations import default_socket
from sessiond.protocol.wire.errors import SessiondError

COMMAND_MODULES = {
    "serve": "daemon_cmds", "start": "daemon_cmds", "stop": "daemon_cmds", "status": "daemon_cmds",
    "flush": "daemon_cmds", "install-service": "daemon_cmds", "uninstall-service": "daemon_cmds",
    "append": "write_cmds", "record": "write_cmds",
    "list": "read_cmds", "check": "read_cmds", "repair": "read_cmds",
    "show": "resume_cmds", "resume": "resume_cmds", "continue": "resume_cmds", "fork": "resume_cmds",
    "tail": "resume_cmds", "watch": "resume_cmds",
    "pull": "mirror_cmds", "push": "mirror_cmds",
    "rm": "lifecycle_cmds", "trash": "lifecycle_cmds", "restore": "lifecycle_cmds", "prune": "lifecycle_cmds",
    "du": "lifecycle_cmds", "rename": "lifecycle_cmds", "tag": "lifecycle_cmds",
    "import": "transfer_cmds", "export": "transfer_cmds",
    "search": "search_cmds", "reindex": "search_cmds",
}
"""Which module of this package defines each command: a run imports only the
one its command needs (``--help`` and completion import them all). A module
imported below registers its commands as usual."""

EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for ``cat`` or ``grep`` when the reader
of their output (``head``) went away first."""


class Context:
    """The global options, handed to every command (a plain class: the CLI's
    start-up imports nothing it does not need)."""

    __slots__ = ("root", "socket", "autostart", "socket_given", "timeout")

    def __init__(self, root: Path | None, socket: Path, autostart: bool, socket_given: bool = False,
                 timeout: float | None = None) -> None:
        self.root = root
        self.socket = socket
        self.autostart = autostart
        self.socket_given = socket_given
        self.timeout = timeout

    def client(self, autostart: bool | None = None):
        from ..connection import DEFAULT_TIMEOUT, Client

        return Client(self.socket, root=self.root, autostart=self.autostart if autostart is None else autostart, name="sessiond-cli",
                      timeout=self.timeout or DEFAULT_TIMEOUT)


class CLI(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMAND_MODULES:
            importlib.import_module(f"{__name__}.{COMMAND_MODULES[name]}")
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command's whole first sentence, wrapped, where click would cut it
        at the terminal width with "..." (a newcomer reads this list first)."""
        rows = [(name, cmd.get_short_help_str(limit=1000)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            finally:
                sys.stdout.flush()  # a reader that left shows here, not at exit
        except BrokenPipeError:
            quiet_stdout()
            ctx.exit(EXIT_BROKEN_PIPE)
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


def quiet_stdout() -> None:
    """The reader of stdout went away (``sessiond tail | head``): point stdout at
    /dev/null so nothing more is tried there, not even at exit, like a Unix tool
    that SIGPIPE ended, without dying of the signal (``serve`` runs in-process)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


def main() -> None:
    cli(prog_name="sessiond")
