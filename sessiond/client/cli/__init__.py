"""The ``sessiond`` command line: human output by default, ``--json`` for programs.

Every expected failure is one line on stderr and a non-zero exit, never a
traceback. ``status``, ``stop`` and the reading commands never start a daemon;
the writing commands autostart one unless ``--no-autostart`` (or
SESSIOND_NO_AUTOSTART=1) is given, in which case ``append`` falls back to writing
the files directly. Commands live in small modules by what they touch: the
daemon's lifecycle, writing, reading.

Importing this package imports no click: the click group is in ``group``
(``cli``, resolved on first use, for the command modules and tests), and
``hook`` is the click-free entry point hooks and agents run at every turn
(``sessiond-hook``: ``status``, ``append``, ``record``), which shares this
package's ``Context``, ``run_guarded`` and the commands' own functions.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: every run imports this package
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

COMMAND_MODULES = {
    "serve": "daemon_cmds", "start": "daemon_cmds", "stop": "daemon_cmds", "status": "daemon_cmds",
    "flush": "daemon_cmds", "install-service": "daemon_cmds", "uninstall-service": "daemon_cmds",
    "append": "write_cmds", "record": "write_cmds",
    "list": "read_cmds", "check": "read_cmds", "repair": "read_cmds",
    "show": "resume_cmds", "resume": "resume_cmds", "continue": "resume_cmds", "fork": "resume_cmds",
    "tail": "follow_cmds", "watch": "follow_cmds",
    "pull": "mirror_cmds", "push": "mirror_cmds",
    "rm": "lifecycle_cmds", "trash": "lifecycle_cmds", "restore": "lifecycle_cmds", "prune": "lifecycle_cmds",
    "du": "lifecycle_cmds", "rename": "lifecycle_cmds", "tag": "lifecycle_cmds",
    "import": "transfer_cmds", "export": "transfer_cmds",
    "search": "search_cmds", "reindex": "search_cmds",
    "secrets": "secrets_cmds",
    "usage": "usage_cmds",
    "pick": "pick_cmds",
    "web": "web_cmds",
}
"""Which module of this package defines each command: a run imports only the
one its command needs (``--help`` and completion import them all). A module
imported registers its commands with the group as usual."""

GLOBAL_OPTION_HELP = {
    "--root": "Store root (default ~/.local/share/sessiond).",
    "--socket": "Daemon socket path.",
    "--no-autostart": "Never start a daemon on demand.",
    "--timeout": "Seconds to wait for the daemon's answer (default 30).",
}
"""The global options' help, in ``sessiond --help`` and ``sessiond-hook --help`` alike."""

EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for ``cat`` or ``grep`` when the reader
of their output (``head``) went away first."""

EXIT_INTERRUPTED = 130
"""128 + SIGINT: what a shell reports for a command stopped by Ctrl-C."""

EXIT_USAGE = 2
"""A command line refused (an unknown command or option, a bad value, two
options that exclude each other): 2, as click and getopt tools exit, in text
and ``--json`` mode alike."""


class UsageError(ValueError):
    """A value or a combination of options no command takes, found where click
    does not look (a click-free module: ``locate``, ``sessiond-hook``): one
    ``sessiond: <what>: <why>`` line and exit ``EXIT_USAGE``, the way
    ``group.CLI`` shows click's own usage errors."""


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

    @classmethod
    def from_options(cls, root: str | Path | None, socket: str | Path | None, no_autostart: bool,
                     timeout: float | None) -> Context:
        """The context of the global options as given (or from their
        environment variables): the one way both entry points build it."""
        from pathlib import Path

        from sessiond.store.locations import default_socket

        return cls(root=Path(root).absolute() if root is not None else None,
                   socket=(Path(socket) if socket is not None else default_socket()).absolute(),
                   autostart=not no_autostart, socket_given=socket is not None, timeout=timeout)

    def client(self, autostart: bool | None = None, other_root_ok: bool = False):
        """A client of the daemon on ``--socket``; with ``--root`` given, one that
        refuses (``WrongRoot``) a daemon of another root unless ``other_root_ok``
        (a reading command that says so and reads the files, ``status``, ``stop``)."""
        from ..connection import DEFAULT_TIMEOUT, Client

        return Client(self.socket, root=self.root, autostart=self.autostart if autostart is None else autostart, name="sessiond-cli",
                      timeout=self.timeout or DEFAULT_TIMEOUT, other_root_ok=other_root_ok)

    def store_root(self) -> Path:
        """The root a command that reads the whole store reads (list, search,
        reindex, trash, du, prune, check). The default root may not exist yet
        (nothing written: nothing to list), but one given by ``--root`` or
        ``SESSIOND_ROOT`` that does not exist is a typo or a missing mount:
        an empty listing with exit 0 would say "no sessions" when the truth is
        "wrong place", so it is ``not_found``, one line, exit 1."""
        from sessiond.store.locations import default_root
        from sessiond.wire.errors import not_found

        if self.root is None:
            return default_root()
        if not self.root.is_dir():
            raise not_found(f"no store at {self.root} (given by --root or SESSIOND_ROOT): no such directory")
        return self.root


MAX_SECONDS = 7 * 86400.0
"""The longest ``--timeout`` (a week): past some 24 days a wait's milliseconds
overflow a C int, and past some 292 years a socket timeout overflows time_t."""


def seconds(value: object, least: float) -> float:
    """``--timeout``'s value: a number of seconds (or a duration, ``2m``:
    ``sessiond.wire.durations``) from ``least`` to ``MAX_SECONDS`` (float() alone lets NaN through, since no comparison with
    it is true, and any huge value, which then overflows where the wait
    begins); ValueError saying what is wrong with it."""
    try:
        number = float(value)  # type: ignore[arg-type]  # a str or a number: float() refuses the rest
    except (TypeError, ValueError):
        from sessiond.wire.durations import is_duration, parse_duration

        if not (isinstance(value, str) and is_duration(value)):  # 2m, 1h: as every duration is written
            raise ValueError(f"{value!r} is not a number of seconds (or a duration: 90s, 2m)") from None
        number = parse_duration(value)
    if not least <= number <= MAX_SECONDS:
        raise ValueError(f"{value} is not in the range {least:g} to {MAX_SECONDS:g} seconds")
    return number


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


def run_guarded(body: Callable[[], object]) -> int | None:
    """Run a command's body as every command runs, on either path: an expected
    failure is one ``sessiond: ...`` line on stderr and exit 1 (a
    ``UsageError``: exit 2), a reader of
    stdout that went away is a quiet exit 141. Returns the exit code of a
    failure, None when the body returned. Ctrl-C (SIGINT) is a quiet exit
    130, as for any Unix tool; what the command was writing is cleaned up by
    the ``finally`` and ``except BaseException`` blocks it unwinds through
    (an export's temp file, an import's unlinked O_TMPFILE)."""
    from sessiond.wire.errors import SessiondError

    from .output import echo

    try:
        try:
            body()
        finally:
            sys.stdout.flush()  # a reader that left shows here, not at exit
    except BrokenPipeError:
        quiet_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except UsageError as exc:
        echo(f"sessiond: {exc}", err=True)
        return EXIT_USAGE
    except (SessiondError, OSError, ValueError) as exc:
        echo(f"sessiond: {exc}", err=True)
        return 1
    return None


def __getattr__(name: str):
    """``cli`` and ``CLI`` (the click group) are imported on first use: the
    command modules' ``from . import cli`` and the tests find them here."""
    if name in ("cli", "CLI"):
        from . import group

        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def escape_undecodable() -> None:
    """Text on stdout that UTF-8 cannot hold (a file name that is not UTF-8,
    which ``os.fsdecode`` gives as lone surrogates) written as ``\\udcXX``
    escapes, not refused: printing a path must never fail the command.
    ``printable`` shows such a byte as ``\\xXX`` where a name is formatted for
    a person; this is the net under the rest (a C locale's stdout already
    writes the bytes themselves)."""
    stdout = sys.stdout
    if hasattr(stdout, "reconfigure"):
        stdout.reconfigure(errors="backslashreplace")


def import_msgspec_lean() -> None:
    """Import msgspec without typing_extensions, unless something already
    imported either. Half of msgspec's import is typing_extensions (itself
    importing inspect, ast, dis), which msgspec only prefers to ``typing`` when
    present (its ``_utils`` falls back when the import fails; on Python 3.11+
    ``typing`` has all it uses). It is kept out for msgspec's import only, and
    importable again afterwards for anything that wants it (rich, textual,
    starlette). Both console scripts import it so, first."""
    if "msgspec" in sys.modules or "typing_extensions" in sys.modules:
        return
    sys.modules["typing_extensions"] = None  # type: ignore[assignment]  # the import system's "not importable"
    try:
        import msgspec  # noqa: F401
    finally:
        if sys.modules.get("typing_extensions", ...) is None:
            del sys.modules["typing_extensions"]


def main() -> None:
    """The ``sessiond`` console script: the click group."""
    if sys.stdout.errors == "strict":  # a UTF-8 locale's; see escape_undecodable
        escape_undecodable()
    if "_SESSIOND_COMPLETE" not in os.environ and not {"-h", "--help"} & set(sys.argv[1:]):
        import_msgspec_lean()  # first: whatever the command imports then finds it loaded (help and completion need none)
    try:
        from .group import cli

        cli(prog_name="sessiond")
    except KeyboardInterrupt:  # before or after a command's body (imports, parsing): as quiet
        sys.exit(EXIT_INTERRUPTED)
