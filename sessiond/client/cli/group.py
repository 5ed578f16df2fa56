"""The click command group: the global options and the lazy command table.

Everything that is not a hot invocation comes here (see ``fastpath``): every
subcommand's options, usage errors, per-command help, completion. Importing it
costs about as much as the interpreter's own start, which is why ``main``
tries the fast path first.
"""

from __future__ import annotations

import importlib
import io
import sys
from pathlib import Path

import click

from sessiond.store.locations import default_socket

from . import COMMAND_MODULES, MAX_SECONDS, Context, run_guarded
from .output import echo
from .toplevel_help import DESCRIPTION, GLOBAL_OPTION_HELP


class Seconds(click.ParamType):
    """A number of seconds from ``least`` to ``MAX_SECONDS``: every ``--timeout``.
    click's FloatRange lets NaN through (no comparison with it is true) and any
    huge value, which then overflow where the wait begins."""

    name = "seconds"

    def __init__(self, least: float = 0.0) -> None:
        self.least = least

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)  # type: ignore[arg-type]  # click's str or a number: float() refuses the rest
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not self.least <= seconds <= MAX_SECONDS:
            self.fail(f"{value} is not in the range {self.least:g} to {MAX_SECONDS:g} seconds", param, ctx)
        return seconds


class CLI(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMAND_MODULES:
            importlib.import_module(f"{__package__}.{COMMAND_MODULES[name]}")
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command's whole first sentence, wrapped, where click would cut it
        at the terminal width with "..." (a newcomer reads this list first)."""
        rows = [(name, cmd.get_short_help_str(limit=1000)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode: bool = True, **extra):
        """Click's own ``main``, but its usage errors and "Aborted!" are written
        through ``echo`` like every other line: a usage error quotes what was
        typed (a command name, an option's value, a path), which may hold any
        control character. Standalone runs exit as click's would."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            shown = io.StringIO()
            exc.show(file=shown)
            echo(shown.getvalue(), err=True, nl=False)
            sys.exit(exc.exit_code)
        except click.Abort:
            echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> None:
        failed = run_guarded(lambda: click.Group.invoke(self, ctx))
        if failed is not None:
            ctx.exit(failed)


@click.group(cls=CLI, help=DESCRIPTION, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", type=click.Path(path_type=Path), envvar="SESSIOND_ROOT", help=GLOBAL_OPTION_HELP["--root"])
@click.option("--socket", "socket_path", type=click.Path(path_type=Path), envvar="SESSIOND_SOCKET", help=GLOBAL_OPTION_HELP["--socket"])
@click.option("--no-autostart", is_flag=True, envvar="SESSIOND_NO_AUTOSTART", help=GLOBAL_OPTION_HELP["--no-autostart"])
@click.option("--timeout", type=Seconds(0.1), envvar="SESSIOND_TIMEOUT", default=None,
              help=GLOBAL_OPTION_HELP["--timeout"])
@click.version_option(package_name="sessiond")
@click.pass_context
def cli(ctx: click.Context, root: Path | None, socket_path: Path | None, no_autostart: bool, timeout: float | None) -> None:
    ctx.obj = Context(
        root=root.absolute() if root else None,
        socket=(socket_path or default_socket()).absolute(),
        autostart=not no_autostart,
        socket_given=socket_path is not None,
        timeout=timeout,
    )
