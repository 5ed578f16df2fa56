"""tail and watch: a transcript's last entries, then (``tail -f``, ``watch``)
the new ones as they are written.

Their own module because they read a file's end and follow it (through the
daemon's stream when one runs, ``following``), where ``resume_cmds`` loads a
whole conversation: they share the session resolver (``locate``) and how an
unreadable file is reported, nothing else.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from sessiond.store.locations import default_root
from sessiond.wire.errors import SessiondError
from sessiond.wire.frames import MAX_COUNT

from . import Context, cli
from .completion import complete_session
from .following import Reader, follow_daemon, poll_file, print_entry
from .group import Seconds
from .locate import locate, resolve, where
from .output import echo, skipped_lines
from .transcript_view import colour, reading_options


def _reader(all_entries: bool, width: int | None, color: str, full: bool) -> Reader:
    return Reader(all_entries=all_entries, width=width, color=colour(color), full=full)


_ALL_ENTRIES = click.option("--all-entries", is_flag=True,
                            help="Show the bookkeeping too: attachments, system entries, progress, file snapshots, "
                                 "metadata (by default not shown).")


@cli.command()
@click.argument("target", metavar="ID|PATH", shell_complete=complete_session)
@click.option("--cwd", default=None, help="Project directory to look in first (default: the current directory).")
@click.option("-n", "--lines", "count", type=click.IntRange(min=0, max=MAX_COUNT), default=10, show_default=True, help="Entries to show first.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing entries as they are written (Ctrl-C stops).")
@click.option("--json", "as_json", is_flag=True, help="Raw entries, one JSON object per line.")
@_ALL_ENTRIES
@reading_options
@click.option("--interval", type=Seconds(0.01), default=0.2, hidden=True)
@click.pass_obj
def tail(obj: Context, target: str, cwd: str | None, count: int, follow: bool, as_json: bool, all_entries: bool,
         width: int | None, color: str, full: bool, interval: float) -> None:
    """The last entries of a transcript, and with -f the new ones as they arrive.

    Each message whole, its Markdown rendered, a tool call with its result
    under it (a result whose call is not among the entries shown says so);
    the bookkeeping counted in a last line (--all-entries shows it).

    -f streams from the daemon when one runs (as it writes them), else follows
    the file (whole lines only: a line still being written is waited for).
    Exit 1 when the file is empty or not a transcript, or when shown lines were
    unreadable (one summary)."""
    from sessiond.store.lastlines import last_lines, line_numbers
    from sessiond.store.regular import open_regular

    path, _ = locate(obj, target, cwd)
    reader = _reader(all_entries, width, color, full)
    with os.fdopen(open_regular(path), "rb") as f:
        window = last_lines(f.fileno(), count)  # read from the end: memory is the lines shown, not the file
        unreadable = [line.offset for line in window.lines if not print_entry(line.data, as_json, reader=reader)]
        shown = len(window.lines) - len(unreadable)
        bad = line_numbers(f.fileno(), unreadable)  # counted only when one is reported
        offset = window.end
        if not follow:
            if reader.hidden and not as_json:
                from sessiond.client.render.conversation import hidden_summary

                echo(f"{hidden_summary(reader.hidden)} (--all-entries shows them)")
            if count:
                _tail_verdict(path, window.blank, shown, bad)
            return
        sys.stdout.flush()
        try:
            counter = [0]
            base: list[int | None] = [None]  # lines before ``offset``: counted at the first unreadable new line

            def shown_one(line: bytes, file: str) -> None:
                counter[0] += 1
                if not line.strip() or print_entry(line, as_json, reader=reader):
                    return
                first = base[0]
                if first is None:
                    first = base[0] = line_numbers(f.fileno(), [offset])[0] - 1
                bad.append(first + counter[0])

            def restart() -> None:
                counter[0], base[0] = 0, 0

            if not follow_daemon(obj, path, offset, shown_one, agents=False):
                poll_file(f, path, offset, interval, shown_one, restart)
            _tail_verdict(path, False, 1, bad)
        except KeyboardInterrupt:
            _tail_verdict(path, False, 1, bad)


@cli.command()
@click.argument("target", metavar="ID|PATH", shell_complete=complete_session)
@click.option("--cwd", default=None, help="Project directory to look in first (default: the current directory).")
@click.option("-n", "count", type=click.IntRange(min=0, max=MAX_COUNT), default=10, show_default=True, help="Turns to show first.")
@click.option("--json", "as_json", is_flag=True, help="Raw entries, one JSON object per line.")
@click.option("--agents", is_flag=True, help="Also the session's subagent files (--json: each entry's file in \"sessiondFile\").")
@_ALL_ENTRIES
@reading_options
@click.option("--interval", type=Seconds(0.01), default=0.2, hidden=True)
@click.pass_obj
def watch(obj: Context, target: str, cwd: str | None, count: int, as_json: bool, agents: bool, all_entries: bool,
          width: int | None, color: str, full: bool, interval: float) -> None:
    """The conversation as it happens: the last N turns, then each new entry.

    Each message is shown whole as it arrives, its Markdown rendered; a tool
    result that comes after its call is shown under a line naming the call.
    Bookkeeping is not shown unless --all-entries.

    Streams from the daemon as it writes (Ctrl-C stops); with no daemon running,
    follows the file instead. A session id with no file yet (its first entries
    still buffered) is waited for."""
    from collections import deque

    from sessiond.store.entries import try_header
    from sessiond.store.linecap import read_span
    from sessiond.store.regular import open_regular

    from .following import POLL_READ, skipped_note

    try:  # Ctrl-C ends a watch at any point, waiting included: exit 0, no "Aborted!"
        path, waited = _watched(obj, target, cwd, interval)
        turns: deque[bytes] = deque(maxlen=count)  # memory: the turns shown, not the file
        offset = 0
        # a file waited for was written after the watch started: all of it is new, shown as it comes
        with os.fdopen(open_regular(path), "rb") as f:
            while not waited and (span := read_span(f.fileno(), offset, POLL_READ)).end > offset:
                if span.skipped:
                    skipped_note(path.name, span.start, span.skipped_bytes)
                turns.extend(line for line in span.lines() if (h := try_header(line)) is not None
                             and h.type in ("user", "assistant") and not h.isSidechain)
                offset = span.end
        reader = _reader(all_entries, width, color, full)
        for line in turns if count else []:
            print_entry(line, as_json, path.name if agents else None, reader)
        sys.stdout.flush()

        def show_one(line: bytes, file: str) -> None:
            print_entry(line, as_json, file if agents else None, reader)

        if follow_daemon(obj, path, offset, show_one, agents=agents):
            return
        if agents:
            echo("sessiond: --agents needs the daemon's stream: following the main transcript only", err=True)
        with os.fdopen(open_regular(path), "rb") as f:  # no daemon: follow the file
            poll_file(f, path, offset, interval, show_one)
    except KeyboardInterrupt:
        return


def _watched(obj: Context, target: str, cwd: str | None, interval: float) -> tuple[Path, bool]:
    """The file ``watch`` follows, and whether it was waited for. A whole
    session id whose file does not exist yet (the daemon has its first entries
    but writes a file only once it holds a message, or they were only just
    queued) is waited for, said once on stderr, rather than refused: ``watch``
    is often started before the agent."""
    import time

    from sessiond.client import lookup

    named = resolve(obj, target)
    if isinstance(named, Path):
        return locate(obj, target, cwd)[0], False
    try:
        return locate(obj, named, cwd)[0], False
    except SessiondError as exc:
        if exc.code != "not_found":
            raise
    root = obj.root or default_root()
    echo(f"sessiond: session {named} has no file yet under {root}; waiting for it (Ctrl-C stops)", err=True)
    here = where(cwd)
    while (loc := lookup.find_session(root, named, here)) is None:
        time.sleep(interval)
    return Path(loc.path), True


def _tail_verdict(path: Path, blank: bool, shown: int, bad: list[int]) -> None:
    if blank:
        raise SessiondError(f"{path} is empty: no transcript entries", code="bad_request")
    if not shown:
        what = f"none of its last {len(bad)} lines is" if bad else "it has no whole line, let alone"
        raise SessiondError(f"{path} is not a transcript: {what} a transcript entry", code="bad_request")
    if bad:
        echo(f"sessiond: {skipped_lines(bad)} of {path}: unreadable", err=True)
        sys.exit(1)
