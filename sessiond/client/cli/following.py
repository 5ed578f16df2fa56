"""Following a transcript as it is written (``tail -f``, ``watch``), each
entry drawn whole as it comes (``Reader``), or with ``--json`` one per line.

Why its own module: a live view has its own sources and rules, apart from
the commands that load a whole conversation: the daemon's ``Subscribe`` stream
when a daemon writes the file, else polling the file for whole lines (a line
still being written is waited for), starting over when the file shrank or
another file took its path, like ``tail -F``. Either way a line longer
than the shared cap (``linecap.MAX_LINE``; for the daemon's stream, longer
than its frames carry) is skipped and said so in one line on stderr; what
follows it is shown as ever.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import Context
from .output import echo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sessiond.client.render.conversation import LiveView

POLL_READ = 1024 * 1024
"""What one look at a polled file reads at most (a longer line: up to the cap)."""


def skipped_note(file: str, offset: int, skipped: int, cap: int | None = None) -> None:
    """The one line saying over-long lines were skipped, ``skipped`` bytes before ``offset`` of ``file``."""
    from sessiond.store.linecap import MAX_LINE

    echo(f"sessiond: skipped {skipped:,} bytes of {file} at byte {offset - skipped:,}: "
         f"a line longer than {min(cap or MAX_LINE, MAX_LINE):,} bytes", err=True)


def poll_file(f, path: Path, offset: int, interval: float, show, restart=lambda: None) -> None:
    """Follow ``path`` (open as ``f``) from ``offset`` by polling, for when no
    daemon runs: whole lines only (a line still being written is waited for),
    each shown as ``show(line, path.name)``, at most ``POLL_READ`` at a time;
    a line over the cap is skipped and said so; a file that shrank (truncated
    or replaced) starts over."""
    import time

    from sessiond.store.linecap import read_span

    while True:
        span = read_span(f.fileno(), offset, POLL_READ)
        if span.skipped:
            skipped_note(path.name, span.start, span.skipped_bytes)
        if span.end > offset:
            for line in span.lines():
                if line:
                    show(line, path.name)
            sys.stdout.flush()  # a pipe reader sees each entry as it comes
            offset = span.end
            if span.data:
                continue  # there may be more at once: read on before sleeping
        elif os.fstat(f.fileno()).st_size < offset:  # truncated in place: start over
            offset = 0
            restart()
        elif _replaced(f.fileno(), path):  # another file at the path now: follow it, like tail -F
            from sessiond.store.regular import open_regular

            fresh = open_regular(path)
            os.dup2(fresh, f.fileno())  # the caller's with block still closes it
            os.close(fresh)
            f.seek(0, os.SEEK_END)  # nothing buffered of the old file survives the seek below
            offset = 0
            restart()
        time.sleep(interval)


def follow_daemon(obj: Context, path: Path, offset: int, show, agents: bool) -> bool:
    """Show (``show(line, file)``, ``file`` relative to the project dir as in
    ``Entries.file``) what the daemon writes to ``path`` from ``offset`` on
    (with ``agents``, to the session's agent files too), as it writes it.
    False when no daemon streams this file (none runs; or one serves another
    root, or refuses it, e.g. a file outside its root, which is said on
    stderr): the caller polls the file instead."""
    from sessiond.store.paths import is_session_id
    from sessiond.wire import messages as m
    from sessiond.wire.errors import DaemonUnavailable, RemoteError

    from ..watch import subscribe
    from .daemon_source import fell_back, other_root, refused, serves

    if not is_session_id(path.stem):
        return False
    try:
        client = obj.client(autostart=False, other_root_ok=True).connect()
    except DaemonUnavailable:
        return False
    with client:
        req = m.Subscribe(id=client.next_id(), session=path.stem, path=str(path.absolute()), offset=offset, agents=agents)
        try:
            if (root := other_root(obj, client)) is not None:
                fell_back(serves(obj, root), f"following {path} by polling it")
                return False
            stream = subscribe(client, req)
            next(stream)  # Subscribed
        except DaemonUnavailable:
            return False
        except RemoteError as exc:
            fell_back(refused(exc), f"following {path} by polling it")
            return False
        for frame in stream:
            if isinstance(frame, m.Unsubscribed):
                echo(f"sessiond: the transcript went away ({frame.reason})", err=True)
                return True
            entries: m.Entries = frame  # type: ignore[assignment]  # after the Subscribed: Entries or Unsubscribed
            if entries.skipped:
                skipped_note(entries.file, entries.offset, entries.skipped, client.max_frame_bytes)
            for line in entries.lines:
                show(line, entries.file)
            sys.stdout.flush()  # a pipe reader sees each entry as it comes
    return True


def _replaced(fd: int, path: Path) -> bool:
    """Whether ``path`` now names another file than ``fd`` (renamed over,
    deleted and recreated); a path with no file yet is waited for."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino)


FILE_KEY = "sessiondFile"
"""The key ``watch --json --agents`` puts first in each entry it prints: the
file the line came from, relative to the project dir (``<id>.jsonl``, or
``<id>/subagents/agent-<a>.jsonl``, ``<id>/subagents/workflows/<run>/agent-<a>.jsonl``)."""


def agent_of(file: str) -> str | None:
    """The agent id of an agent file's relative path (``agent-<a>.jsonl``), None for the main transcript."""
    name = Path(file).name
    return name[len("agent-"):-len(".jsonl")] if "/" in file and name.startswith("agent-") else None


class Reader:
    """Entries drawn for a person as they come (``tail``, ``watch``): each
    file's own live view model (``render.conversation.LiveView``: a result
    that arrives after its call is printed under a line naming the call, the
    next entry of one response goes on under its turn's header), drawn by
    ``render.terminal``: whole messages, Markdown rendered, wrapped to the
    width. Bookkeeping is counted (``hidden``) unless ``all_entries``."""

    def __init__(self, *, all_entries: bool = False, width: int | None = None, color: bool = False,
                 full: bool = False) -> None:
        from .output import terminal_columns

        self.all_entries = all_entries
        self.width = width or terminal_columns()
        self.color = color
        self.full = full
        self.views: dict[str, LiveView] = {}
        self.last: str | None = None  # the file whose turn was printed last
        self.last_call: str | None = None  # the id of the call printed last, when nothing came after it
        self.printed = False

    @property
    def hidden(self) -> dict[str, int]:
        """Bookkeeping entries not shown, by kind, over every file."""
        out: dict[str, int] = {}
        for view in self.views.values():
            for kind, n in view.hidden.items():
                out[kind] = out.get(kind, 0) + n
        return out

    def show(self, entry: dict, file: str | None) -> None:
        from sessiond.client.render.conversation import LiveView, ToolCall
        from sessiond.client.render.terminal import Style, render_turns

        from .output import rendered

        key = file or ""
        view = self.views.get(key)
        if view is None:
            view = self.views[key] = LiveView(all_entries=self.all_entries)
        arrived = view.add(entry)
        if not arrived.turns:
            return
        style = Style(width=self.width, color=self.color, full=self.full,
                      agent=agent_of(file) if file is not None else None)
        first = arrived.turns[0].blocks[0] if arrived.turns[0].blocks else None
        attached = (self.last == key and isinstance(first, ToolCall) and arrived.turns[0].role == "tool"
                    and first.id == self.last_call)
        text = render_turns(arrived.turns, style, continues=arrived.continues and self.last == key,
                            gap=self.printed, attached=attached)
        if text:
            rendered(text)
            self.printed = True
        self.last = key
        end = arrived.turns[-1].blocks[-1] if arrived.turns[-1].blocks else None
        self.last_call = end.id if isinstance(end, ToolCall) and end.result is None else None


def print_entry(line: bytes, as_json: bool, file: str | None = None, reader: Reader | None = None) -> bool:
    """Print one entry; False (nothing printed) when the line is not one.
    ``file`` (its file relative to the project dir, for ``watch --agents``):
    with ``as_json`` the line gets ``FILE_KEY`` first, the rest of its bytes
    as they are; for people (drawn by ``reader``) the header of a turn of an
    agent file starts with ``[<agent>]``."""
    from sessiond.store.entries import decode_object

    e = decode_object(line)  # a lone surrogate reads as U+FFFD, as everywhere
    if e is None:
        return False
    if as_json:
        if file is not None:
            line = _with_file(line, file)
        echo(line.decode("utf-8", "replace").encode())  # --json: the entry's own text, as bytes
        return True
    (reader or Reader()).show(e, file)
    return True


def _with_file(line: bytes, file: str) -> bytes:
    """``line`` (one JSON object) with ``FILE_KEY: file`` spliced in as its
    first member: the entry's own bytes are not re-encoded."""
    import json

    head, brace, rest = line.partition(b"{")
    # a name that is not UTF-8: its bytes as \udcXX escapes, as every --json writes them (sessiond/wire/fsnames.py)
    member = f"{json.dumps(FILE_KEY)}:{json.dumps(file, ensure_ascii=False)}".encode("utf-8", "backslashreplace")
    empty = rest.lstrip(b" \t\r\n").startswith(b"}")  # {} has no member to put a comma before
    return head + brace + member + (b"" if empty else b",") + rest
