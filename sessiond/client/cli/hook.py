"""``sessiond-hook``: the commands hooks and agents run at every turn, without click.

    sessiond-hook [GLOBAL OPTIONS] status [--json]
    sessiond-hook [GLOBAL OPTIONS] append --cwd DIR --session ID [--agent ID] [--run ID] [--durability D] [--json] [SOURCE]
    sessiond-hook [GLOBAL OPTIONS] record --cwd DIR --session ID [--agent ID] [--parent UUID] [--agent-version V]
                                          [--durability D] [--json] [SOURCE]

A second console script beside ``sessiond`` (as pueue has ``pueue`` and
``pueued``): importing click costs about as much as the interpreter's own
start, which a hook pays at every turn. This entry point parses exactly these
three command lines by hand (global options before the command, as
``sessiond``'s) and runs the very functions the click commands run
(``report_status``, ``append_entries``, ``record_messages``), so the output,
the errors (one ``sessiond: ...`` line) and the exit codes are the click
commands'. A usage error is one line ``sessiond-hook: ...`` on stderr and exit
2, click's exit for one. Everything else, help included, is ``sessiond``'s.

It imports msgspec without typing_extensions (``import_msgspec_lean``) and
the wire's core messages only (``sessiond/wire/core.py``).
"""

from __future__ import annotations

import os
import sys

from . import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    GLOBAL_OPTION_HELP,
    Context,
    UsageError,
    escape_undecodable,
    import_msgspec_lean,
    run_guarded,
    seconds,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO

PROG = "sessiond-hook"

TRUE_WORDS = frozenset({"1", "true", "t", "yes", "y", "on"})
FALSE_WORDS = frozenset({"0", "false", "f", "no", "n", "off"})
"""What click's BOOL type reads from ``SESSIOND_NO_AUTOSTART`` (trimmed, any case)."""

USAGE = f"""Usage: {PROG} [OPTIONS] status [--json]
       {PROG} [OPTIONS] append --cwd DIR --session ID [--agent ID] [--run ID]
                       [--durability queued|written|durable] [--json] [SOURCE]
       {PROG} [OPTIONS] record --cwd DIR --session ID [--agent ID] [--parent UUID]
                       [--agent-version VERSION] [--durability ...] [--json] [SOURCE]

  The commands hooks and agents run at every turn, starting without click:
  the same output, errors and exit codes as `sessiond status|append|record`
  (see `sessiond COMMAND --help`). SOURCE is a file, or - (the default) for stdin.

Options:
  --root PATH        {GLOBAL_OPTION_HELP["--root"]}
  --socket PATH      {GLOBAL_OPTION_HELP["--socket"]}
  --no-autostart     {GLOBAL_OPTION_HELP["--no-autostart"]}
  --timeout SECONDS  {GLOBAL_OPTION_HELP["--timeout"]}
  -h, --help         Show this message and exit.
"""


def parse(args: list[str], flags: set[str], values: set[str], *, max_positional: int,
          stop_at_positional: bool = False) -> tuple[dict[str, str | bool], list[str]]:
    """Long options as click parses them: ``--opt value`` or ``--opt=value``
    (the next word is the value, whatever it looks like), flags, ``--`` ends
    the options, the last of an option given twice wins; positionals anywhere,
    unless ``stop_at_positional`` (the global options: the rest from the
    command on is returned as it is)."""
    given: dict[str, str | bool] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            positional += args[i:]
            break
        if not word.startswith("-") or word == "-":
            positional.append(word)
            if stop_at_positional:
                return given, positional + args[i:]
            continue
        name, eq, inline = word.partition("=")
        if name in flags:
            if eq:
                raise UsageError(f"option {name} does not take a value")
            given[name] = True
        elif name in values:
            if eq:
                given[name] = inline
            elif i < len(args):
                given[name] = args[i]
                i += 1
            else:
                raise UsageError(f"option {name} requires an argument")
        else:
            raise UsageError(f"no such option: {name}")
    if len(positional) > max_positional:
        raise UsageError(f"unexpected argument {positional[max_positional]!r}")
    return given, positional


def context(given: dict[str, str | bool]) -> Context:
    """The global options given before the command, else their environment
    variables (unset or empty: not given), checked as ``sessiond`` checks them."""

    def value(option: str, env: str) -> str | bool | None:
        return given[option] if option in given else (os.environ.get(env) or None)

    no_autostart = value("--no-autostart", "SESSIOND_NO_AUTOSTART")
    if isinstance(no_autostart, str):
        word = no_autostart.strip().lower()
        if word not in TRUE_WORDS | FALSE_WORDS:
            raise UsageError(f"SESSIOND_NO_AUTOSTART: {no_autostart!r} is not a valid boolean")
        no_autostart = word in TRUE_WORDS
    timeout = value("--timeout", "SESSIOND_TIMEOUT")
    try:
        checked = None if timeout is None else seconds(timeout, 0.1)
    except ValueError as exc:
        raise UsageError(f"--timeout: {exc}") from None
    root, socket = value("--root", "SESSIOND_ROOT"), value("--socket", "SESSIOND_SOCKET")
    return Context.from_options(root if isinstance(root, str) else None, socket if isinstance(socket, str) else None,
                                bool(no_autostart), checked)


def source(positional: list[str]) -> IO[bytes]:
    """The input: stdin for ``-`` (the default), else the file named."""
    name = positional[0] if positional else "-"
    if name == "-":
        return sys.stdin.buffer
    try:
        return open(name, "rb")  # noqa: SIM115 (read to the end by the command; closed at exit)
    except OSError as exc:
        raise UsageError(f"cannot read SOURCE {name!r}: {exc.strerror}") from None


def writing_options(args: list[str], extra: set[str]) -> tuple[dict[str, str | bool], IO[bytes]]:
    """The options both writing commands take (with ``extra`` of their own),
    the required ones there and ``--durability`` one of its choices."""
    from .appending import DURABILITY_CHOICES

    given, positional = parse(args, {"--json"}, {"--cwd", "--session", "--agent", "--durability", *extra}, max_positional=1)
    for required in ("--cwd", "--session"):
        if required not in given:
            raise UsageError(f"missing option {required}")
    if given.setdefault("--durability", "queued") not in DURABILITY_CHOICES:
        raise UsageError(f"--durability: {given['--durability']!r} is not one of {', '.join(DURABILITY_CHOICES)}")
    return given, source(positional)


def status(obj: Context, args: list[str]) -> Callable[[], None]:
    given, _ = parse(args, {"--json"}, set(), max_positional=0)

    def body() -> None:
        from .status_report import report_status

        report_status(obj, bool(given.get("--json")))

    return body


def append(obj: Context, args: list[str]) -> Callable[[], None]:
    given, stream = writing_options(args, {"--run"})

    def body() -> None:
        from .appending import append_entries

        append_entries(obj, str(given["--cwd"]), str(given["--session"]), text(given, "--agent"), text(given, "--run"),
                       str(given["--durability"]), bool(given.get("--json")), stream)

    return body


def record(obj: Context, args: list[str]) -> Callable[[], None]:
    given, stream = writing_options(args, {"--parent", "--agent-version"})

    def body() -> None:
        from .recording import record_messages

        record_messages(obj, str(given["--cwd"]), str(given["--session"]), text(given, "--agent"),
                        text(given, "--parent"), text(given, "--agent-version"), str(given["--durability"]),
                        bool(given.get("--json")), stream)

    return body


def text(given: dict[str, str | bool], option: str) -> str | None:
    value = given.get(option)
    return value if isinstance(value, str) else None


COMMANDS: dict[str, Callable[[Context, list[str]], Callable[[], None]]] = {"status": status, "append": append,
                                                                             "record": record}
"""Each command parses its arguments and returns the body to run."""


def run(argv: list[str]) -> int:
    """Run ``argv`` (without the program name); its exit code."""
    if argv in (["-h"], ["--help"]):
        from .output import echo

        echo(USAGE, nl=False)
        return 0
    import_msgspec_lean()  # first: whatever the command imports then finds it loaded
    try:
        given, rest = parse(argv, {"--no-autostart"}, {"--root", "--socket", "--timeout"}, max_positional=1,
                            stop_at_positional=True)
        if not rest:
            raise UsageError(f"missing command ({', '.join(COMMANDS)}; {PROG} --help)")
        command = COMMANDS.get(rest[0])
        if command is None:
            import difflib  # only for a mistyped command, as the click group suggests one

            meant = difflib.get_close_matches(rest[0], COMMANDS, n=1, cutoff=0.6)
            raise UsageError(f"no such command: {rest[0]!r}" + (f"; did you mean: {meant[0]}" if meant else "")
                             + f" ({', '.join(COMMANDS)}; everything else is `sessiond {rest[0]}`)")
        body = command(context(given), rest[1:])
    except UsageError as exc:
        from .output import echo

        echo(f"{PROG}: {exc}", err=True)
        return EXIT_USAGE
    failed = run_guarded(body)
    return 0 if failed is None else failed


def main() -> None:
    """The ``sessiond-hook`` console script."""
    if sys.stdout.errors == "strict":  # a UTF-8 locale's; see escape_undecodable
        escape_undecodable()
    try:
        sys.exit(run(sys.argv[1:]))
    except KeyboardInterrupt:  # before or after a command's body (imports, parsing): as quiet as sessiond's
        sys.exit(EXIT_INTERRUPTED)
