"""``sessiond append``: raw entries from a file or stdin into a session, and
the input checks both writing commands share (``EntryReader``, ``finish``).

Input that is not transcript entries never "succeeds": lines that are not one
JSON object each are left out and counted in one summary line (the first few
line numbers shown), and the exit is 1; input with no entry at all is refused
before anything is sent. Entries that cannot make a file on their own (a
session's summary or snapshot with no user/assistant message) are reported at
once, since by the lazy-materialization rule they are never written alone.

Click-free: the click command and ``sessiond-hook append`` both call ``append_entries``.
"""

from __future__ import annotations

import os
import sys

from sessiond.store.bom import strip_bom
from sessiond.store.locations import default_root
from sessiond.wire.errors import DaemonUnavailable, EntryTooLarge, SessiondError

from . import Context
from .output import count, echo, echo_json, skipped_lines

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (sessiond-hook never does)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import IO, Any

    from ..connection import Client

BATCH_ENTRIES = 256
BATCH_BYTES = 4 * 1024 * 1024
ENVELOPE_ROOM = 1024
"""What ``record``'s envelope (ids, timestamps, version, git branch) adds to a message, cwd aside."""


DURABILITY_CHOICES = ("queued", "written", "durable")
"""``messages.DURABILITIES``, spelled here so ``--help`` need not import the
wire messages (a test keeps the two equal)."""


class EntryReader:
    """Non-blank lines of the input that are single JSON objects; the numbers of
    the other lines are kept in ``bad`` (for one summary line) and left out.

    With a frame budget (``overhead`` and ``cap``), a line too large for any
    frame the daemon accepts is reported too, counted in ``too_large`` and left
    out: it is never sent, so it can never loop through reconnects and resends.
    """

    def __init__(self, stream: IO[bytes], overhead: int = 0, cap: int | None = None) -> None:
        self.stream = stream
        self.bad: list[int] = []
        self.why = ""
        """What was wrong with the first bad line (the others are only counted)."""
        self.good = 0
        self.too_large = 0
        self.overhead = overhead
        self.cap = cap

    @property
    def skipped(self) -> int:
        return len(self.bad)

    def __iter__(self) -> Iterator[bytes]:
        from sessiond.store.entries import decode_header

        from ..batching import check_entry

        for number, raw in enumerate(self.stream, 1):
            line = entry_line(raw)
            if line is None:
                continue
            try:
                if self.cap is not None:
                    check_entry(len(line), self.overhead, self.cap)
            except EntryTooLarge as exc:
                echo(f"sessiond: line {number}: {exc}", err=True)
                self.too_large += 1
                continue
            try:
                decode_header(line)
            except SessiondError as exc:
                if not self.bad:
                    self.why = f"line {number}: {exc}"
                self.bad.append(number)
                continue
            self.good += 1
            yield line

    def name(self) -> str:
        name = getattr(self.stream, "name", "-")
        return "stdin" if name in ("-", "<stdin>") or not isinstance(name, str) else name

    def refuse_if_empty(self) -> None:
        """Nothing usable in the input: one line saying so, exit 1."""
        if self.good or self.too_large:  # entries over the cap are reported as such
            return
        if self.bad:
            raise SessiondError(f"{self.name()} is not a transcript: none of its {len(self.bad)} non-blank lines "
                                f"is one JSON object ({self.why}); nothing written", code="bad_request")
        raise SessiondError(f"{self.name()} has no entries (it is empty); nothing written", code="bad_request")

    def report_skipped(self) -> bool:
        """One stderr line for the skipped lines; True when there were any."""
        if self.bad:
            echo(f"sessiond: {skipped_lines(self.bad)} of {self.name()}: not one JSON object each ({self.why})", err=True)
        return bool(self.bad)

    def fail_if_too_large(self) -> None:
        if self.too_large:
            raise EntryTooLarge(f"{self.too_large} entr{'y' if self.too_large == 1 else 'ies'} over the frame cap not stored (see above)")


def entry_line(raw: bytes) -> bytes | None:
    """One line of the input as it is sent (its line break and a leading BOM
    cut: a file saved on Windows starts with one, and the daemon writes what it
    is sent), or None for a blank line, which is skipped (and still counted in
    the line numbers)."""
    line = strip_bom(raw.rstrip(b"\r\n"))
    return line if line.strip() else None


def append_entries(obj: Context, cwd: str, session: str, agent: str | None, run: str | None, durability: str,
                   as_json: bool, source: IO[bytes]) -> None:
    """Send the entries of ``source`` to the daemon in pipelined batches (or,
    with no daemon and no autostart, write them to the files directly), then
    print the counts; exit 1 for what ``finish`` reports."""
    from sessiond.store.paths import check_cwd, check_session_id

    if cwd and not os.path.isabs(cwd):  # taken from the current directory, as list and every reader take it
        cwd = os.path.abspath(cwd)
    check_cwd(cwd)
    session = check_session_id(session)
    client = obj.client()
    try:
        client.connect()
    except DaemonUnavailable as exc:
        _append_without_daemon(obj, exc, cwd, session, agent, run, as_json, source)
        return
    _append_batches(client, cwd, session, agent, run, durability, as_json, source)


def _append_without_daemon(obj: Context, exc: DaemonUnavailable, cwd: str, session: str, agent: str | None,
                           run: str | None, as_json: bool, source: IO[bytes]) -> None:
    """No daemon answers: with no autostart (and no daemon starting up), write
    the files directly and say so; else the error is the command's."""
    from sessiond.store.locations import daemon_holds_lock

    if obj.autostart or daemon_holds_lock(obj.socket):
        raise exc
    from ..fallback import direct_append

    lines = EntryReader(source)  # no frames: no cap
    batch = list(lines)
    lines.refuse_if_empty()
    res = direct_append(obj.root or default_root(), cwd, session, batch, agent=agent, run=run)
    if res.trashed:
        raise SessiondError(f"session {session} is in the trash (sessiond restore {session} brings it back)", code="not_found")
    echo(f"sessiond: {exc}; wrote directly to the files", err=True)
    report(as_json, session, res.written, res.duplicates, lines.skipped, direct=True, dropped=res.dropped)
    finish(lines, res.dropped)


def _append_batches(client: Client, cwd: str, session: str, agent: str | None, run: str | None, durability: str,
                    as_json: bool, source: IO[bytes]) -> None:
    """Every line checked here, bad ones reported and left out, the rest
    pipelined in batches that fit the daemon's frames."""
    from sessiond.wire import core as m

    from ..batching import pack, request_overhead

    accepted = duplicates = pending = 0
    overhead = request_overhead(m.Append(id=0, session=session, cwd=cwd, entries=[], durability=durability, agent=agent, run=run))  # type: ignore[arg-type]  # click.Choice gives one of Durability's values
    cap = client.max_frame_bytes
    lines = EntryReader(source, overhead, cap)
    with client:
        batches = pack(lines, min(BATCH_BYTES, cap - overhead), BATCH_ENTRIES)
        first = next(batches, None)
        if first is None:
            lines.refuse_if_empty()
        reqs = (
            m.Append(id=client.next_id(), session=session, cwd=cwd, entries=batch, durability=durability, agent=agent, run=run)  # type: ignore[arg-type]  # click.Choice gives one of Durability's values
            for batch in chain_first(first, batches)
        )
        for resp in client.pipeline(reqs, window=16):
            if isinstance(resp, m.Error):
                raise SessiondError(resp.message, code=resp.code)
            assert isinstance(resp, m.Appended)
            accepted += resp.accepted
            duplicates += resp.duplicates
            pending = resp.pending
        client.call(m.Close(id=client.next_id(), session=session))
    report(as_json, session, accepted, duplicates, lines.skipped, pending=pending)
    finish(lines, pending)


def chain_first(first: list[bytes] | None, rest: Iterator[list[bytes]]) -> Iterator[list[bytes]]:
    if first is not None:
        yield first
        yield from rest


def finish(lines: EntryReader, unwritten: int) -> None:
    """The verdicts that make the exit 1, each one line on stderr."""
    failed = lines.report_skipped()
    if unwritten:
        n = f"{unwritten} entr{'ies' if unwritten != 1 else 'y'}"
        echo(f"sessiond: no file was written: the session has {n} but no user or assistant message, and "
                   "summaries, snapshots and metadata are not kept on their own (lazy materialization); "
                   "to bring in an existing transcript file use `sessiond import FILE`", err=True)
        failed = True
    lines.fail_if_too_large()
    if failed:
        sys.exit(1)


def report(as_json: bool, session: str, accepted: int, duplicates: int, skipped: int, *, direct: bool = False,
            dropped: int = 0, pending: int = 0) -> None:
    if as_json:
        out: dict[str, Any] = {"session": session, "accepted": accepted, "duplicates": duplicates, "skipped": skipped}
        if pending:
            out["pending"] = pending
        if direct:
            out["direct"] = True
            out["dropped"] = dropped
        echo_json(out)
        return
    note = f"{count(duplicates, 'duplicate')} dropped"
    if skipped:
        note += f", {count(skipped, 'invalid line')} skipped"
    if dropped:
        note += f", {count(dropped, 'entry', 'entries')} without a message not written"
    if pending:
        note += ", none written yet: no message in the session"
    echo(f"{count(accepted, 'entry', 'entries')} {'written' if direct else 'accepted'} for session {session} ({note})")
