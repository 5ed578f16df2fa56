"""``sessiond record``: messages chained into a session through a ``Session``
(which stamps the envelope and the parent links), with the input checks of
``appending``.

Click-free: the click command and ``sessiond-hook record`` both call ``record_messages``.
"""

from __future__ import annotations

import os
from pathlib import Path

from sessiond.wire.errors import SessiondError

from . import Context
from .appending import BATCH_BYTES, BATCH_ENTRIES, ENVELOPE_ROOM, EntryReader, chain_first, finish
from .output import count, echo, echo_json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (sessiond-hook never does)
if TYPE_CHECKING:
    from typing import IO

    from ..connection import Client


def record_messages(obj: Context, cwd: str, session: str, agent: str | None, parent: str | None,
                    agent_version: str | None, durability: str, as_json: bool, source: IO[bytes]) -> None:
    """Record the messages of ``source`` (one JSON object per line) in order,
    chained after ``parent`` or the session's last message, then print the
    counts; exit 1 for what ``finish`` reports."""
    from sessiond.store.paths import check_cwd, check_session_id
    from sessiond.store.reencode import decode_entry
    from sessiond.wire.core import Record

    from ..batching import pack, request_overhead
    from ..session import Session

    if cwd and not os.path.isabs(cwd):  # taken from the current directory, as append and list take it
        cwd = os.path.abspath(cwd)
    check_cwd(cwd)
    session = check_session_id(session)
    with obj.client() as client:
        if parent is not None:
            _refuse_dangling(obj, client, session, cwd, agent, parent)
        overhead = request_overhead(Record(id=0, session=session, cwd=cwd, messages=[], agent=agent))
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


def _refuse_dangling(obj: Context, client: Client, session: str, cwd: str, agent: str | None, parent: str) -> None:
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
