"""One session's tokens and cost, from its own files: what ``show`` and the
picker print beside a conversation.

The same rules and sums as ``sessiond usage session`` (``charges``,
``reports``): the session is its transcript and every ``*.jsonl`` under the
directory of the same name that ccusage's path rule (``charges.session_of``)
gives to it (its subagents), taken in path order, each API response counted
once, priced by the shipped table. Only this session's files are read, so a
response it shares with another session (a copy of the same message id and
request id, as a fork writes) counts here too, where the whole-store report
counts it once, in the file that comes first.
"""

from __future__ import annotations

from pathlib import Path

from sessiond.wire.spend import Row

from .charges import Ledger, charges_of_file, session_of, transcripts
from .prices import Prices
from .reports import Pricer, Sums


def session_files(path: Path) -> list[tuple[Path, tuple[str, ...]]]:
    """The transcript at ``path`` and the files ccusage counts in its session
    (its subagents, under ``<dir>/<session id>/``), in path order, each with
    its parts below the projects dir (the transcript's grandparent)."""
    projects = path.parent.parent
    own: tuple[str, ...] = (path.parent.name, path.name)
    session, project = session_of(own)
    found: list[tuple[Path, tuple[str, ...]]] = [(path, own)]
    below = path.with_name(path.name[:-len(".jsonl")]) if path.name.endswith(".jsonl") else None
    if below is not None and below.is_dir():
        base = len(projects.parts)
        for sub, _ in transcripts(below):
            relative = sub.parts[base:]
            if session_of(relative) == (session, project):
                found.append((sub, relative))
    found.sort(key=lambda f: str(f[0]))
    return found


def session_spend(path: Path, prices: Prices | None = None) -> Row:
    """The tokens (input, output, cache write, cache read, total), cost in USD
    and models of the session whose transcript is ``path``, subagents included,
    with the models the table has no price for (``unpriced``: their tokens
    counted, their cost not). A file that cannot be read counts nothing."""
    ledger = Ledger()
    for file, relative in session_files(path):
        try:
            ledger.extend(charges_of_file(file, relative))
        except OSError:
            continue
    pricer = Pricer(prices or Prices.load())
    sums = Sums()
    for charge in ledger.charges:
        sums.add(charge, *pricer.cost(charge))
    session, project = session_of((path.parent.name, path.name))
    return sums.row(session, False, project, times=True)
