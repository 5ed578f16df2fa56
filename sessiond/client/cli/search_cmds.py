"""search and reindex: ranked full-text search of every conversation.

``search`` asks a running daemon (which keeps the index current); with none it
reads the index itself, read-only, and with no index either it scans the files
and says so. Reading never starts a daemon. ``reindex`` rebuilds the index in
the daemon (starting one unless --no-autostart), showing progress on a tty.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import click
import msgspec

from sessiond.wire.errors import DaemonUnavailable, SessiondError, not_found
from sessiond.wire.hit import MAX_LIMIT

from . import Context, cli
from .daemon_source import fell_back, other_root, refused, serves
from .hints import nothing_found
from .locate import project_scope
from .output import clip, colour_on, count, echo, echo_json, printable, project_label, shell_word, size, when

BOLD = "\x1b[1;33m"
DIM = "\x1b[2m"
RESET = "\x1b[0m"


@cli.command()
@click.argument("query", nargs=-1, required=True)
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--all", "all_projects", is_flag=True, help="Search every project.")
@click.option("--limit", type=click.IntRange(min=1, max=MAX_LIMIT), default=20, show_default=True, help="At most N sessions.")
@click.option("--since", default=None, help="Only entries since DATE (2026-01-31, an ISO date-time, or 3d / 12h / 2w ago).")
@click.option("--role", type=click.Choice(["user", "assistant", "tool"]), default=None, help="Only prompts, answers, or tool calls and results.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of hits, best first.")
@click.pass_obj
def search(obj: Context, query: tuple[str, ...], cwd: str | None, all_projects: bool, limit: int, since: str | None,
           role: str | None, as_json: bool) -> None:
    """Find conversations: words (all must match), "quoted phrases", prefix*.

    The best-matching entry of each session is shown, best sessions first."""
    from sessiond.search import query as q

    text = " ".join(query)
    try:
        q.parse(text)
    except q.QueryError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        since_iso = q.parse_since(since)
    except q.QueryError as exc:
        raise click.BadParameter(str(exc).removeprefix("--since "), param_hint="--since") from None
    root = obj.store_root()
    dirs = project_scope(root, cwd, all_projects)
    hits, note = find_hits(obj, root, text, dirs, limit, since_iso, role)
    if note:
        echo(f"sessiond: {note}", err=True)
    if as_json:
        out = [{k: v for k, v in msgspec.to_builtins(h).items() if k != "highlights"} | {"highlights": h.highlights}
               for h in hits]
        echo_json(out)
    if not hits:  # exit 1, as grep's, in --json mode too
        if not as_json:
            echo(nothing_found(obj, "matches", cwd, all_projects, "--all searches"), err=True)
        sys.exit(1)
    if as_json:
        return
    tty = colour_on()  # bold matches and dim details only on a terminal, and not with NO_COLOR
    here = os.path.realpath(cwd or os.getcwd())
    now = time.time()
    for h in hits:
        title = clip(h.title or "(untitled)", 70)
        where = project_label(h.cwd, h.project)
        side = f"  [subagent {h.agentId}]" if h.agentId else ("  [sidechain]" if h.sidechain else "")
        info = printable(f"{where} · {when(h.timestamp, now)} · {h.role}{side}")
        echo(f"\x1b[1m{title}{RESET}  {DIM}{info}{RESET}" if tty else f"{title}  {info}", raw=True)  # fields printable, styles ours
        echo("    " + _highlight(h.snippet, h.highlights, tty), raw=True)
        resume = f"sessiond resume {h.sessionId}"
        if h.cwd and os.path.realpath(h.cwd) != here:
            resume = f"cd {shell_word(h.cwd)} && {resume}"
        echo(f"    {DIM if tty else ''}{printable(resume)}{RESET if tty else ''}", raw=True)


def find_hits(obj: Context, root: Path, text: str, dirs: list[Path] | None, limit: int, since: str | None = None,
              role: str | None = None):
    """(hits, note): the ranked hits of ``text`` in ``dirs`` (None: every
    project), best first, from a running daemon of this root, else from the
    index read-only, else from a scan of the files; ``note`` says what a person
    should know of how they were found (None: nothing). What ``search`` prints
    and the web view shows."""
    projects = None if dirs is None else [d.name for d in dirs]
    hits, note = _from_daemon(obj, text, dirs, limit, since, role)
    if hits is None:
        why = note  # a daemon that runs but did not answer: said with what was done instead
        hits, note = _offline(root, text, projects, limit, since, role, daemon_runs=why is not None)
        if why is not None:
            fell_back(why, note or "searched the index read-only")
            note = None
    return hits, note


def _highlight(snippet: str, spans: list[tuple[int, int]], tty: bool) -> str:
    """One line; the matches in bold on a terminal."""
    if not tty:
        return printable(" ".join(snippet.split()))
    out, pos = [], 0
    for a, b in spans:  # the spans index the snippet as it is: each piece shown printable, then styled
        out += [printable(snippet[pos:a]), BOLD, printable(snippet[a:b]), RESET]
        pos = b
    out.append(printable(snippet[pos:]))
    return " ".join("".join(out).split())


def _from_daemon(obj: Context, text: str, dirs: list[Path] | None, limit: int, since: str | None, role: str | None):
    """(hits, note) from a running daemon of this root; (None, None) when none
    runs; (None, why) when one runs but its answer cannot be used (it serves
    another root, or its index is off), for the caller to say."""
    from sessiond.wire import messages as m
    from sessiond.wire.errors import DaemonUnavailable, RemoteError

    if dirs is not None and not dirs:
        return [], None
    try:
        with obj.client(autostart=False, other_root_ok=True) as client:
            if (root := other_root(obj, client)) is not None:
                return None, serves(obj, root)
            resp = client.call(m.Search(id=client.next_id(), query=text, dirs=[str(d) for d in dirs or []],
                                        all=dirs is None, limit=limit, since=since, role=role))
    except DaemonUnavailable:
        return None, None
    except RemoteError as exc:
        if exc.code == "not_found":  # the index is off there
            return None, refused(exc)
        raise
    notes = [] if resp.caughtUp else ["the indexer is behind: the newest lines may be missing"]
    if resp.rebuilt:
        notes.append(resp.rebuilt)
    if resp.scanned:
        notes.append(f"{resp.scanned}: scanned the files")
    if resp.window:
        notes.append(_window_note(resp.window))
    return resp.hits, "; ".join(notes) or None


def _window_note(window: int) -> str:
    return (f"more than {window} entries match: ranked among the newest {window} "
            "(add a word or a \"phrase\" for the full ranking)")


def _offline(root: Path, text: str, projects: list[str] | None, limit: int, since: str | None, role: str | None,
             daemon_runs: bool = False):
    """(hits, note) from the index read-only, else from a scan of the files
    (the note says so, and, when no daemon runs, how to get an index)."""
    import sqlite3

    from sessiond.search import query as q
    from sessiond.search.indexfile import MISSING, problem
    from sessiond.search.scan import scan
    from sessiond.search.schema import index_path

    if projects is not None and not projects:
        return [], None
    path = index_path(root, _configured_index())
    reason = problem(path)  # never hand SQLite a FIFO (it would block), a symlink or a file that lost its header
    if reason == MISSING:
        reason = "no search index yet"
    elif reason is not None:
        reason = f"the search index {path} is unusable ({reason})"
    else:
        try:
            conn = q.open_read_only(path)
            try:
                behind = q.files_behind(conn, root, projects)
                if not behind:
                    found = q.run(conn, root, text, projects=projects, limit=limit, since=since, role=role)
                    return found.hits, _window_note(found.window) if found.window else None
                reason = f"the search index is behind {count(behind, 'file')}"
            except q.QueryTooCostly as exc:
                raise SessiondError(str(exc), code="bad_request") from None
            finally:
                conn.close()
        except sqlite3.Error as exc:
            reason = f"the search index {path} is unreadable ({exc})"
    hint = "" if daemon_runs else " (start the daemon to index them)"
    return scan(root, text, projects=projects, limit=limit, since=since, role=role), f"{reason}: scanned the files{hint}"


def _configured_index() -> Path | None:
    from sessiond.store.locations import _from_config_file

    value = _from_config_file("search_index_path")
    return Path(value) if value else None


@cli.command()
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--all", "all_projects", is_flag=True, help="Rebuild the whole index.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: files, bytes, seconds.")
@click.pass_obj
def reindex(obj: Context, cwd: str | None, all_projects: bool, as_json: bool) -> None:
    """Rebuild the search index from the files (the project's, or --all)."""
    from sessiond.wire import messages as m

    root = obj.store_root()
    dirs = project_scope(root, cwd, all_projects)
    if dirs is not None and not dirs:
        raise not_found(nothing_found(obj, "sessions", cwd, False, "--all rebuilds"))
    with obj.client() as client:  # WrongRoot when it serves another root: never reindex that one
        # The answer comes when the rebuild is done, a minute or more for gigabytes: it is awaited as long as
        # the daemon keeps answering the watcher's status requests, each within --timeout.
        watcher = _ReindexWatch(obj, client, show=sys.stderr.isatty() and not as_json)
        watcher.start()
        try:
            with client.untimed():
                resp = client.call(m.Reindex(id=client.next_id(), dirs=[str(d) for d in dirs or []], all=dirs is None))
        except DaemonUnavailable:
            if watcher.lost is not None:
                raise watcher.lost from None
            raise
        finally:
            watcher.stop()
    if as_json:  # the documented keys, not the wire frame (its "op" and request "id" are the protocol's)
        echo_json({"files": resp.files, "bytes": resp.bytes, "seconds": resp.seconds})
        return
    mbs = resp.bytes / 1e6 / resp.seconds if resp.seconds else 0
    echo(f"indexed {count(resp.files, 'file')}, {size(resp.bytes)} in {resp.seconds:.1f}s ({mbs:.0f} MB/s)")


class _ReindexWatch(threading.Thread):
    """While a reindex runs: the daemon's status on a second connection every
    ``EVERY`` seconds, each answer awaited ``--timeout`` at most, drawn as a
    counter on a terminal (``show``). A status not answered in time means the
    daemon is stuck or gone: the reindex's own wait is aborted, and ``lost``
    says why."""

    EVERY = 0.2

    def __init__(self, obj: Context, client, show: bool) -> None:
        super().__init__(daemon=True)
        self.obj, self.client, self.show = obj, client, show
        self.lost: DaemonUnavailable | None = None
        self._over = threading.Event()

    def stop(self) -> None:
        self._over.set()
        self.join(timeout=2)

    def run(self) -> None:
        shown = False
        try:
            with self.obj.client(autostart=False) as client:
                while not self._over.wait(self.EVERY):
                    idx = client.status().index or {}
                    total = int(idx.get("reindexTotalBytes") or 0)
                    if self.show and total:
                        done = int(idx.get("reindexDoneBytes") or 0)
                        echo(f"\rindexing {size(done)} / {size(total)} ({100 * done // total}%)", err=True, nl=False, raw=True)
                        shown = True
        except DaemonUnavailable as exc:
            if not self._over.is_set():
                self.lost = DaemonUnavailable(f"the daemon stopped answering during the reindex ({exc}); "
                                              "it may still be rebuilding: `sessiond status` shows its progress")
                self.client.abort()
        except Exception:  # noqa: BLE001 (a counter that cannot be drawn must not stop the reindex)
            pass
        if shown:
            echo("\r" + " " * 50 + "\r", err=True, nl=False, raw=True)
