"""The click command group: the global options and the lazy command table.

Every ``sessiond`` command line comes here: every subcommand's options, usage
errors, per-command help, completion. Importing click costs about as much as
the interpreter's own start; the commands hooks and agents run at every turn
have their own click-free entry point, ``sessiond-hook`` (``hook.py``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click
from click.shell_completion import BashComplete, CompletionItem, add_completion_class

from . import COMMAND_MODULES, EXIT_USAGE, GLOBAL_OPTION_HELP, Context, run_guarded, seconds
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


class Parsed(click.ParamType):
    """A value one of the CLI's own parsers reads from its text (``parse``:
    the value, or ValueError saying what is wrong): refused as every usage
    error is (one line, exit 2), not by the command's body (exit 1)."""

    @staticmethod
    def parse(text: str) -> object:
        raise NotImplementedError

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None):
        if not isinstance(value, str):  # already converted
            return value
        try:
            return self.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Duration(Parsed):
    """A length of time in seconds, written as every option writes one
    (``sessiond.wire.durations``: 45s, 30m, 2h, 7d, 2w, 3mo, 1y): each
    ``--older-than``."""

    name = "duration"

    @staticmethod
    def parse(text: str) -> float:
        from sessiond.wire.durations import parse_duration

        return parse_duration(text)


class Day(click.DateTime):
    """A day: ``YYYY-MM-DD`` (or ``YYYYMMDD``), or a duration ago as every
    option writes one (``7d``, ``3mo``, ``1y``: the local day that long
    before now). ``usage --since/--until``."""

    name = "day"

    def __init__(self) -> None:
        super().__init__(["%Y-%m-%d", "%Y%m%d"])

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DAY"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None):
        from datetime import datetime, timedelta

        from sessiond.wire.durations import FORMS, is_duration, parse_duration

        if isinstance(value, str) and is_duration(value):
            try:
                return datetime.now() - timedelta(seconds=parse_duration(value))
            except (ValueError, OverflowError) as exc:
                self.fail(str(exc) if isinstance(exc, ValueError) else f"{value!r} ago is before year 1", param, ctx)
        if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 8:
            self.fail(f"not a day: {value!r} (a number needs a unit: {FORMS}; or a date, 2026-01-31)", param, ctx)
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"not a day: {value!r} (a date, 2026-01-31, or an age: {FORMS})", param, ctx)


class ByteSize(Parsed):
    """A number of bytes (``500K``, ``10M``, ``1G``: ``lifecycle.parse_size``):
    ``prune --larger-than``."""

    name = "size"

    @staticmethod
    def parse(text: str) -> int:
        from ..lifecycle import parse_size

        return parse_size(text)


class NoSuchCommand(click.UsageError):
    """A command name no group has: what was typed, and the commands meant."""

    def __init__(self, name: str, ctx: click.Context, names: list[str]) -> None:
        import difflib

        meant = [n for n in names if n.startswith(name)] if len(name) >= 2 else []
        meant = meant[:3] or difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        hint = f"did you mean: {', '.join(meant)}" if meant else f"`{ctx.command_path} --help` lists the commands"
        super().__init__(f"no such command; {hint}", ctx)
        self.name = name


def usage_line(exc: click.ClickException) -> str:
    """The one line a command line click refused is shown as, the way every
    other refusal reads: ``sessiond: <what>: <why>`` (what: the option, the
    argument, the command typed; why: click's words, an option meant for a
    mistyped one included). Click's own three lines (usage, a hint, "Error:")
    said the same less plainly, and unlike every other error of the CLI."""
    what: str | None = None
    why = exc.format_message()
    if isinstance(exc, NoSuchCommand):
        what = exc.name
    elif isinstance(exc, click.NoSuchOption):
        what, why = exc.option_name, "no such option"
        if exc.possibilities:
            why += f"; did you mean: {', '.join(sorted(exc.possibilities))}"
    elif isinstance(exc, click.BadParameter) and not isinstance(exc, click.MissingParameter):
        hint = exc.param_hint if isinstance(exc.param_hint, str) else None
        if hint is None and isinstance(exc.param, click.Option):
            hint = "/".join(exc.param.opts)  # click's hint, unquoted: -n/--lines
        elif hint is None and exc.param is not None:
            hint = exc.param.human_readable_name
        what, why = hint, exc.message
    if what is None and isinstance(exc, click.UsageError) and exc.ctx is not None:
        what = exc.ctx.command_path.partition(" ")[2] or None  # the subcommand ("trash empty"); none for the group
    why = why.strip().rstrip(".")
    if what and why.startswith(what + " "):  # "trash empty deletes for good: ...": it names itself
        what = None
    if why[:1].isupper() and why[1:2].islower():  # click's sentences ("Got unexpected extra argument")
        why = why[0].lower() + why[1:]
    return f"sessiond: {what}: {why}" if what else f"sessiond: {why}"


class Suggesting(click.Group):
    """A command group that answers a mistyped command with the ones meant
    (``sessiond lsit``: "did you mean: list"), as click already does for
    options: a prefix of commands, else the names ``difflib`` finds close."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = click.utils.make_str(args[0])
        if not ctx.resilient_parsing and not name.startswith("-") and self.get_command(ctx, name) is None:
            raise NoSuchCommand(name, ctx, self.list_commands(ctx))
        return super().resolve_command(ctx, args)


class BashTitles(BashComplete):
    """Bash completion of a session with its title beside each id, as zsh and
    fish show a candidate's help: bash prints only values, so where there is a
    choice each value is "ID  title" (the shell inserts the ids' common start,
    never a title); a single candidate is the id alone, inserted whole."""

    def complete(self) -> str:
        args, incomplete = self.get_completion_args()
        items = self.get_completions(args, incomplete)
        if len(items) > 1:  # a session's item carries its title (completion.py); a command's or option's does not
            items = [CompletionItem(f"{i.value}  {i.title}", type=i.type) if i.title else i for i in items]
        return "\n".join(self.format_completion(item) for item in items)


add_completion_class(BashTitles, "bash")


class CLI(Suggesting):
    """The ``sessiond`` command group: lists every command but imports a command's
    module only when that command runs (``COMMAND_MODULES``), writes usage errors
    in one line through ``echo`` like every other line (``usage_line``), and
    suggests the command meant (``Suggesting``; its subgroups too)."""

    group_class = Suggesting

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
        """Click's own ``main``, but its usage errors (``usage_line``: one line,
        exit 2) and "Aborted!" are written through ``echo`` like every other
        line: a usage error quotes what was typed (a command name, an option's
        value, a path), which may hold any control character. Standalone runs
        exit as click's would."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            echo(usage_line(exc), err=True)
            sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
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
