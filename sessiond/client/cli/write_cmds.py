"""Commands that write: append (raw entries) and record (chained messages).

Both check their input alike (``appending.EntryReader`` and ``finish``: input
that is not transcript entries never "succeeds"). ``append`` is a hot command
(an agent's hook runs it): its work is in ``appending``, click-free.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import click

from sessiond.wire.errors import SessiondError

from . import Context, cli
from .appending import (
    BATCH_BYTES,
    BATCH_ENTRIES,
    DURABILITY_CHOICES,
    ENVELOPE_ROOM,
    EntryReader,
    append_entries,
    chain_first,
    finish,
)
from .output import count, echo, echo_json

__all__ = ["BATCH_BYTES", "BATCH_ENTRIES", "DURABILITY_CHOICES", "append", "record"]


def session_input(agent_help: str):
    """The options both writing commands take: which session, how durable, from where."""

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        decorators: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
            click.option("--cwd", required=True, help="The session's working directory (relative: from the current one)."),
            click.option("--session", required=True, help="Session id (a UUID)."),
            click.option("--agent", default=None, help=agent_help),
            click.option("--durability", type=click.Choice(DURABILITY_CHOICES), default="queued", show_default=True,
                         help="Answer once the entries are accepted, written (write(2)) or durable (fdatasync)."),
            click.option("--json", "as_json", is_flag=True, help="One JSON object with the counts."),
            click.argument("source", type=click.File("rb"), default="-"),
            click.pass_obj,
        ]
        for deco in reversed(decorators):
            f = deco(f)
        return f

    return apply


@cli.command()
@session_input("Route every entry to this agent's transcript.")
@click.option("--run", default=None, help="Workflow run id of the agent.")
def append(obj: Context, cwd: str, session: str, agent: str | None, run: str | None, durability: str, as_json: bool, source: IO[bytes]) -> None:
    """Store raw entries (one JSON object per line) from SOURCE or stdin.

    Exit 1 when a line was skipped, when the input holds no entry, or when no
    file could be written (entries with no user/assistant message)."""
    append_entries(obj, cwd, session, agent, run, durability, as_json, source)


@cli.command()
@session_input("Record into this agent's (sidechain) transcript.")
@click.option("--parent", default=None, help="Chain after this uuid (a message of the session) instead of its last message.")
@click.option("--agent-version", default=None, metavar="VERSION",
              help="The envelope's `version` for messages without one (default: sessiond's).")
def record(obj: Context, cwd: str, session: str, agent: str | None, parent: str | None, agent_version: str | None,
           durability: str, as_json: bool, source: IO[bytes]) -> None:
    """Record messages (one JSON object per line), chaining their parents (SPEC 3.1).

    Exit 1 when a line was skipped, the input holds no message, or no file
    could be written (entries with no user/assistant message)."""
    from sessiond.store.paths import check_cwd, check_session_id
    from sessiond.store.reencode import decode_entry
    from sessiond.wire import messages as m

    from ..batching import pack, request_overhead
    from ..session import Session

    if cwd and not os.path.isabs(cwd):  # taken from the current directory, as append and list take it
        cwd = os.path.abspath(cwd)
    check_cwd(cwd)
    session = check_session_id(session)
    with obj.client() as client:
        if parent is not None:
            _refuse_dangling(obj, client, session, cwd, agent, parent)
        overhead = request_overhead(m.Record(id=0, session=session, cwd=cwd, messages=[], agent=agent))
        cap = client.max_frame_bytes
        lines = EntryReader(source, overhead + ENVELOPE_ROOM + len(cwd), cap)  # the envelope stamped on each message
        batches = pack(lines, min(BATCH_BYTES, cap - overhead), BATCH_ENTRIES)
        first = next(batches, None)
        if first is None:
            lines.refuse_if_empty()
        s = Session(client, session, cwd, agent=agent, durability=durability,  # type: ignore[arg-type]  # click.Choice gives one of Durability's values
                    reconnect_timeout=min(10.0, client.timeout))
        if agent_version is not None:
            s.version = agent_version
        s.hint = parent
        for batch in chain_first(first, batches):
            s.record([decode_entry(line) for line in batch])
        result = s.close(timeout=min(5.0, client.timeout))
    if result is not None and result.undelivered:
        raise SessiondError(f"{result.undelivered} entries of session {session} were not delivered: "
                            "the daemon did not answer and writing beside it is unsafe")
    if as_json:
        echo_json({"session": session, "recorded": s.accepted, "duplicates": s.duplicates, "last": s.hint, "skipped": lines.skipped})
    else:
        echo(f"{count(s.accepted, 'message')} recorded in session {session} ({s.duplicates} already there); last {s.hint}")
    finish(lines, s.pending)


def _refuse_dangling(obj: Context, client, session: str, cwd: str, agent: str | None, parent: str) -> None:
    """Refuse a ``--parent`` that is no message of the session (or of the agent's
    transcript with ``--agent``): chaining onto it would write a dangling parent,
    the very gap resume has to bridge. Checked in the file after a flush (so
    everything acknowledged is in it), streaming: only lines holding the uuid's
    bytes are decoded, and memory stays one line whatever the file's size."""
    from sessiond.client.lookup import find_session
    from sessiond.store.entries import is_chain_participant, try_header
    from sessiond.store.jsonl import iter_lines
    from sessiond.store.locations import default_root
    from sessiond.store.paths import agent_file

    client.flush(session)
    loc = find_session(obj.root or default_root(), session, cwd, search_all=False)
    where = f"agent {agent} of session {session}" if agent else f"session {session}"
    if loc is not None:
        path = agent_file(Path(loc.project_dir), session, agent) if agent else Path(loc.path)
        needle = parent.encode()
        try:
            for line in iter_lines(path):
                if needle in line:
                    header = try_header(line)
                    if header is not None and header.uuid == parent and is_chain_participant(header) \
                            and (agent is not None or not header.isSidechain):
                        return
        except FileNotFoundError:
            pass
    raise SessiondError(f"--parent {parent} is not a message of {where}: recording after it would "
                        "leave a dangling parent link", code="not_found")
