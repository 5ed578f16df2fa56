"""Commands that write: append (raw entries) and record (chained messages).

Both check their input alike (``appending.EntryReader`` and ``finish``: input
that is not transcript entries never "succeeds"). Hooks and agents run them at
every turn through ``sessiond-hook``: their work is click-free, in
``appending`` and ``recording``, which both entry points call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

import click

from . import Context, cli
from .appending import BATCH_BYTES, BATCH_ENTRIES, DURABILITY_CHOICES, append_entries
from .recording import record_messages

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
    record_messages(obj, cwd, session, agent, parent, agent_version, durability, as_json, source)
