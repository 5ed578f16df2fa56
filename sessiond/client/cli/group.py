"""The click command group: the global options and the lazy command table.

Every ``sessiond`` command line comes here: every subcommand's options, usage
errors, per-command help, completion. Importing click costs about as much as
the interpreter's own start; the commands hooks and agents run at every turn
have their own click-free entry point, ``sessiond-hook`` (``hook.py``).
"""

from __future__ import annotations

import importlib
import io
import sys
from pathlib import Path

import click

from . import COMMAND_MODULES, GLOBAL_OPTION_HELP, Context, run_guarded, seconds
from .output import echo

DESCRIPTION = "sessiond: one daemon that owns every AI-agent transcript file."


class Seconds(click.ParamType):
    """A number of seconds from ``least`` to ``MAX_SECONDS``: every ``--timeout``
    (``seconds``: click's FloatRange lets NaN and overflowing values through)."""

    name = "seconds"

    def __init__(self, least: float = 0.0) -> None:
        self.least = least

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            return seconds(value, self.least)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class CLI(click.Group):
    """The ``sessiond`` command group: lists every command but imports a command's
    module only when that command runs (``COMMAND_MODULES``), and writes usage errors
    through ``echo`` like every other line."""

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


@click.group(cls=CLI, help=DESCRIPTION, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", type=click.Path(path_type=Path), envvar="SESSIOND_ROOT", help=GLOBAL_OPTION_HELP["--root"])
@click.option("--socket", "socket_path", type=click.Path(path_type=Path), envvar="SESSIOND_SOCKET", help=GLOBAL_OPTION_HELP["--socket"])
@click.option("--no-autostart", is_flag=True, envvar="SESSIOND_NO_AUTOSTART", help=GLOBAL_OPTION_HELP["--no-autostart"])
@click.option("--timeout", type=Seconds(0.1), envvar="SESSIOND_TIMEOUT", default=None,
              help=GLOBAL_OPTION_HELP["--timeout"])
@click.version_option(package_name="sessiond")
@click.pass_context
def cli(ctx: click.Context, root: Path | None, socket_path: Path | None, no_autostart: bool, timeout: float | None) -> None:
    ctx.obj = Context.from_options(root, socket_path, no_autostart, timeout)
    if ctx.invoked_subcommand is None:  # `sessiond` alone: the picker on a terminal, else the usage (exit 2)
        if sys.stdin.isatty() and sys.stdout.isatty():
            pick = cli.get_command(ctx, "pick")
            assert pick is not None
            ctx.invoke(pick)
            return
        echo(ctx.get_help(), err=True)
        ctx.exit(2)
