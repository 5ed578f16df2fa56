"""The hot invocations without click: parsed by hand, run by the same functions.

A hook or a shell prompt runs ``sessiond --help``, ``status``, ``append`` and
``list`` at every turn; importing click costs as much CPU as the interpreter's
own start. This module understands exactly those command lines (with the
global options and the options each of those commands takes) and hands the
parsed values to the click-free function the click command calls too
(``report_status``, ``append_entries``, ``list_sessions``), so there is one
implementation of each command.

It declines (``run_fast`` returns None, and click takes the command line
unchanged) for anything it does not fully understand: another command, an
option it does not know (a subcommand's ``--help``, ``--version``), a value it
would have to judge (not a plain number, empty, starting with ``-``, not one
of the choices, a source file it cannot open), an option given twice, a
missing required option, an environment variable whose value is not one click
documents, or shell completion (``_SESSIOND_COMPLETE``). So usage errors,
per-command help and completion stay click's, word for word.

The commands it runs speak the wire on the lite codec (``sessiond/wire/lite.py``:
no msgspec) wherever their output needs no Struct (``status`` and ``list``
without ``--json``, ``append`` always); an answer the lite codec does not
handle runs the command again on msgspec's (``_lite_first``).
"""

from __future__ import annotations

import os
import sys

from . import COMMAND_MODULES, MAX_SECONDS, TYPE_CHECKING, Context, import_msgspec_lean, run_guarded

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

EXIT_NO_ARGS = 2
"""click's exit for a bare ``sessiond`` (the help on stderr, as for a usage error)."""

TRUE_WORDS = frozenset({"1", "true", "t", "yes", "y", "on"})
FALSE_WORDS = frozenset({"0", "false", "f", "no", "n", "off"})
"""What click's BOOL type reads from an environment variable (trimmed, any case)."""


class Decline(Exception):
    """The command line is not one the fast path fully understands."""


def run_fast(argv: list[str]) -> int | None:
    """Run ``argv`` (without the program name) when it is a hot invocation and
    return its exit code; None when click should take it."""
    if "_SESSIOND_COMPLETE" in os.environ:
        return None
    if argv in ([], ["-h"], ["--help"]):
        return _print_help(err=not argv)
    try:
        given, rest = _parse(argv, flags={"--no-autostart"}, values={"--root": _text, "--socket": _text, "--timeout": _seconds},
                             stop_at_positional=True)
        command = HOT.get(rest[0]) if rest else None  # no command after the options: click's "Missing command."
        if command is None:
            return None
        body = command(_context(given), rest[1:])
    except Decline:
        return None
    failed = run_guarded(body)  # Ctrl-C included: exit 130, as on click's path
    return 0 if failed is None else failed


def _print_help(err: bool) -> int | None:
    from .output import echo, terminal_columns
    from .toplevel_help import SHORT_HELP, help_text

    if set(SHORT_HELP) != set(COMMAND_MODULES):  # a command the table lacks: click knows its help
        return None
    try:
        echo(help_text(sorted(COMMAND_MODULES), terminal_columns()), err=err, nl=False)
    except BrokenPipeError:  # as click's main: quiet, exit 1
        from . import quiet_stdout

        quiet_stdout()
        return 1
    return EXIT_NO_ARGS if err else 0


def _context(given: dict[str, object]) -> Context:
    """The global options given before the command, else their environment
    variables, as the click group builds them."""
    from pathlib import Path

    from sessiond.store.locations import default_socket

    root = _given_or_env(given, "--root", "SESSIOND_ROOT", _text)
    socket = _given_or_env(given, "--socket", "SESSIOND_SOCKET", _text)
    no_autostart = _given_or_env(given, "--no-autostart", "SESSIOND_NO_AUTOSTART", _boolean) or False
    timeout = _given_or_env(given, "--timeout", "SESSIOND_TIMEOUT", _seconds)
    return Context(root=Path(root).absolute() if root else None,
                   socket=(Path(socket) if socket else default_socket()).absolute(),
                   autostart=not no_autostart, socket_given=socket is not None, timeout=timeout)


def _lite_first(obj: Context, lite: bool, run: Callable[[Context], None]) -> Callable[[], None]:
    """The body that runs a command on the lite codec (no msgspec) when
    ``lite``, and again from the start on msgspec's when an answer is one the
    lite codec does not handle (``NotLite``: raised before anything is
    printed or read; once ``append`` has read input it handles its own,
    replaying that input). Off the lite codec, msgspec is imported without
    typing_extensions first."""

    def body() -> None:
        ctx = obj
        if lite:
            from sessiond.wire.lite import NotLite

            obj.lite = True
            try:
                run(obj)
                return
            except NotLite:
                ctx = obj.without_lite()
        import_msgspec_lean()
        run(ctx)

    return body


def _status(obj: Context, args: list[str]) -> Callable[[], None]:
    given, _ = _parse(args, flags={"--json"}, values={}, max_positional=0)
    as_json = given.get("--json", False)

    def run(ctx: Context) -> None:
        from .status_report import report_status

        report_status(ctx, as_json)

    return _lite_first(obj, not as_json, run)  # --json prints msgspec's own rendering of the Struct


def _list(obj: Context, args: list[str]) -> Callable[[], None]:
    given, _ = _parse(args, flags={"--all", "--worktrees", "--json"},
                      values={"--cwd": _text, "--limit": _count(1), "--offset": _count(0)}, max_positional=0)

    as_json = given.get("--json", False)

    def run(ctx: Context) -> None:
        from .session_list import list_sessions

        list_sessions(ctx, given.get("--cwd"), given.get("--all", False), given.get("--worktrees", False),
                      given.get("--limit"), given.get("--offset", 0), as_json)

    return _lite_first(obj, not as_json, run)  # --json prints msgspec's own rendering of each session


def _append(obj: Context, args: list[str]) -> Callable[[], None]:
    from .appending import DURABILITY_CHOICES

    given, positional = _parse(args, flags={"--json"},
                               values={"--cwd": _text, "--session": _text, "--agent": _text, "--run": _text,
                                       "--durability": _choice(DURABILITY_CHOICES)}, max_positional=1)
    if "--cwd" not in given or "--session" not in given:
        raise Decline  # click says which is missing
    source = positional[0] if positional else "-"
    if source == "-":
        stream = sys.stdin.buffer
    else:
        try:
            stream = open(source, "rb")  # noqa: SIM115 (read to the end by the command; closed at exit)
        except OSError:
            raise Decline from None  # click names the file and why

    def run(ctx: Context) -> None:
        from .appending import append_entries

        append_entries(ctx, given["--cwd"], given["--session"], given.get("--agent"), given.get("--run"),
                       given.get("--durability", "queued"), given.get("--json", False), stream)

    return _lite_first(obj, True, run)  # --json too: its counts print the same from either codec


HOT: dict[str, Callable[[Context, list[str]], Callable[[], None]]] = {"status": _status, "list": _list, "append": _append}
"""The commands the fast path runs: each parses its arguments (or declines)
and returns the body to run."""


def _parse(args: list[str], *, flags: set[str], values: dict[str, Callable[[str], object]], max_positional: int = 0,
           stop_at_positional: bool = False) -> tuple[dict[str, Any], list[str]]:
    """Long options as click parses them (``--opt value``, ``--opt=value``,
    flags, ``--`` ends the options; positionals anywhere unless
    ``stop_at_positional``, where the rest is returned as it is)."""
    given: dict[str, object] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            positional += args[i:]
            break
        if not token.startswith("-") or token == "-":
            positional.append(token)
            if stop_at_positional:
                return given, positional + args[i:]
            continue
        name, eq, inline = token.partition("=")
        if name in given:
            raise Decline  # given twice
        if name in flags and not eq:
            given[name] = True
        elif name in values:
            if eq:
                value = inline
            elif i < len(args) and not args[i].startswith("-"):
                value = args[i]
                i += 1
            else:
                raise Decline
            given[name] = values[name](value)
        else:
            raise Decline  # -h, --help, --version, an unknown option, a flag given a value
    if len(positional) > max_positional:
        raise Decline
    return given, positional


def _given_or_env(given: dict[str, object], option: str, env: str, convert: Callable[[str], object]):
    """The option's value from the command line, else from its environment
    variable as click reads it (unset or empty: no value)."""
    if option in given:
        return given[option]
    value = os.environ.get(env)
    return convert(value) if value else None


def _text(value: str) -> str:
    if not value:
        raise Decline
    return value


def _seconds(value: str) -> float:
    """A plain decimal from 0.1 to ``MAX_SECONDS`` (``--timeout``'s range); anything
    else (``inf``, ``1e3``, ``0``) is click's to judge."""
    if not (value.isascii() and value.replace(".", "", 1).isdigit()) or not 0.1 <= float(value) <= MAX_SECONDS:
        raise Decline
    return float(value)


def _count(least: int) -> Callable[[str], int]:
    def convert(value: str) -> int:
        from sessiond.wire.frames import MAX_COUNT  # the command's codec imports it anyway

        if not (value.isascii() and value.isdigit()) or not least <= int(value) <= MAX_COUNT:
            raise Decline  # click says what is wrong with it
        return int(value)

    return convert


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def convert(value: str) -> str:
        if value not in choices:
            raise Decline
        return value

    return convert


def _boolean(value: str) -> bool:
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise Decline
