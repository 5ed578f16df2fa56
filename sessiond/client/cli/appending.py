"""``sessiond append``: raw entries from a file or stdin into a session, and
the input checks both writing commands share (``EntryReader``, ``finish``).

Input that is not transcript entries never "succeeds": lines that are not one
JSON object each are left out and counted in one summary line (the first few
line numbers shown), and the exit is 1; input with no entry at all is refused
before anything is sent. Entries that cannot make a file on their own (a
session's summary or snapshot with no user/assistant message) are reported at
once, since by the lazy-materialization rule they are never written alone.

Click-free: the click command and the fast path both call ``append_entries``.
"""

from __future__ import annotations

import os
import sys

from sessiond.store.bom import strip_bom
from sessiond.store.locations import default_root
from sessiond.wire.errors import DaemonUnavailable, EntryTooLarge, SessiondError

from . import Context, import_msgspec_lean
from .output import count, echo, echo_json, skipped_lines

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the lite append never does)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import IO, Any

    from sessiond.wire.messages import Appended

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


class Replay:
    """The input with its first lines already read: iterating it gives those
    lines again, then the rest of the stream, so the msgspec path reads the
    input from its start (line numbers and all) after the lite path looked."""

    def __init__(self, stream: IO[bytes], head: list[bytes]) -> None:
        self.stream = stream
        self.head = head
        self.name = getattr(stream, "name", "-")

    def __iter__(self) -> Iterator[bytes]:
        yield from self.head
        yield from self.stream


def append_entries(obj: Context, cwd: str, session: str, agent: str | None, run: str | None, durability: str,
                   as_json: bool, source: IO[bytes]) -> None:
    """Send the entries of ``source`` to the daemon in pipelined batches (or,
    with no daemon and no autostart, write them to the files directly), then
    print the counts; exit 1 for what ``finish`` reports.

    On the lite codec (the fast path), a small input goes as one batch
    (``_append_one_batch``); anything else runs this again from the start on
    msgspec's codec, with the lines already read replayed."""
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
    if client.codec.lite:
        replay = _append_one_batch(client, cwd, session, agent, run, durability, as_json, source)
        if replay is not None:
            import_msgspec_lean()
            append_entries(obj.without_lite(), cwd, session, agent, run, durability, as_json,
                           replay)  # type: ignore[arg-type]  # a Replay reads as the stream it wraps
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
    """The msgspec path: every line checked here, bad ones reported and left
    out, the rest pipelined in batches that fit the daemon's frames."""
    from sessiond.wire import messages as m

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


def _append_one_batch(client: Client, cwd: str, session: str, agent: str | None, run: str | None, durability: str,
                      as_json: bool, source: IO[bytes]) -> Replay | None:
    """The hot case (a hook appending a few entries) on the lite codec: the
    input sent as ONE batch without checking its lines here (no msgspec).

    The daemon checks every entry with the same ``decode_header`` the msgspec
    path uses and refuses a batch with a bad entry whole, writing nothing
    (``decode_headers`` runs before anything is accepted). So the outcome is
    today's whenever the lines are all good, and otherwise nothing happened:
    the input is handed back (a ``Replay``) for the msgspec path to run from
    the start, whose output (skipped-line summaries, exit codes) is today's.
    The same happens, before anything is sent, for input that is empty, more
    than one batch, or has a line over the frame cap, and for an answer the
    lite codec does not read. None when the command is done here."""
    from sessiond.wire.lite import NotLite

    from ..batching import check_entry, pack, request_overhead

    m = client.messages
    with client:
        overhead = request_overhead(m.Append(id=0, session=session, cwd=cwd, entries=[], durability=durability, agent=agent, run=run),
                                    client.codec)
        budget = min(BATCH_BYTES, client.max_frame_bytes - overhead)
        head, entries, whole = _read_head(source, BATCH_ENTRIES, budget)
        if not whole:  # more than one batch's worth: the msgspec path streams it
            return Replay(source, head)
        try:
            for entry in entries:
                check_entry(len(entry), overhead, client.max_frame_bytes)
        except EntryTooLarge:
            return Replay(source, head)
        batches = list(pack(entries, budget, BATCH_ENTRIES))
        if len(batches) != 1:  # nothing, or more than one batch: the msgspec path's pipeline
            return Replay(source, head)
        req = m.Append(id=client.next_id(), session=session, cwd=cwd, entries=entries, durability=durability, agent=agent, run=run)
        try:
            client.send(req)
            resp = client.receive(req.id)
        except NotLite:
            return Replay(source, head)
        if isinstance(resp, m.Error):
            if _all_good(head, entries):  # today's path sends this very batch: this is its answer
                raise SessiondError(resp.message, code=resp.code)
            return Replay(source, head)  # a batch with a bad entry: refused whole, nothing written
        try:
            client.call(m.Close(id=client.next_id(), session=session))
        except NotLite as exc:  # the entries are in: never sent again
            raise SessiondError(f"unexpected answer to Close: {exc}", code="internal") from None
    appended: Appended = resp  # type: ignore[assignment]  # not an Error: the answer to an Append (lite's or messages.py's)
    report(as_json, session, appended.accepted, appended.duplicates, 0, pending=appended.pending)
    finish(EntryReader(source), appended.pending)  # a reader with no line skipped and none too large
    return None


def _read_head(source: IO[bytes], max_entries: int, budget: int) -> tuple[list[bytes], list[bytes], bool]:
    """The input's first lines as read (``head``), its entries among them, and
    whether that is the whole input: reading stops at the end, or as soon as
    there is more than one batch's worth (``max_entries`` entries, ``budget``
    bytes), so a big input is not held twice before the msgspec path streams it."""
    from ..batching import ENTRY_OVERHEAD

    head: list[bytes] = []
    entries: list[bytes] = []
    used = 0
    for raw in source:
        head.append(raw)
        line = entry_line(raw)
        if line is None:
            continue
        entries.append(line)
        used += len(line) + ENTRY_OVERHEAD
        if len(entries) > max_entries or used > budget:
            return head, entries, False
    return head, entries, True


def _all_good(head: list[bytes], entries: list[bytes]) -> bool:
    """Whether the msgspec path's ``EntryReader`` keeps every entry of the input:
    asked only when the daemon refused the batch, to tell today's answer (the
    same batch sent) from a refusal of a line that path would have left out."""
    import io

    return list(EntryReader(io.BytesIO(b"".join(head)))) == entries


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
