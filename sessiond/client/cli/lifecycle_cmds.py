"""Cleaning up without ever losing a session: rm, trash, restore, prune, du,
rename, tag (SPEC 9).

``rm`` and ``prune`` move sessions into ``<root>/.trash`` (see
``sessiond/store/trash.py``); only ``trash empty`` deletes. Each goes through the
daemon when one serves the root, else works on the files directly
(``sessiond/client/lifecycle.py``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import click
import msgspec

from sessiond.store.locations import default_root
from sessiond.wire.errors import SessiondError
from sessiond.wire.records import TrashEntry

from . import Context, cli
from .completion import complete_session, complete_trashed
from .group import ByteSize, Duration
from .hints import nothing_found
from .locate import find, id_prefix, one_of, project_scope, where
from .locate import session_id as resolved_id
from .naming import Named, line_title, named, trashed_named, trashed_transcript
from .output import clip_left, count, echo, echo_json, printable_name, size, when


def _ops(obj: Context):
    from ..lifecycle import Lifecycle

    return Lifecycle(obj.root or default_root(), obj.socket)


def _find(obj: Context, session: str, cwd: str | None):
    """The session's location in the store, or not_found."""
    return find(obj.root or default_root(), session, cwd)


def _entry_line(e, name: Named) -> str:
    """A trash entry on one line: its session, title, size and project."""
    return f"{e.session}  {line_title(name.title)}  {size(e.bytes)}, {count(e.files, 'file')}  ({name.project})"


@cli.command()
@click.argument("sessions", nargs=-1, required=True, metavar="ID...", shell_complete=complete_session)
@click.option("--cwd", default=None, help="Project directory to look in first (default: the current directory).")
@click.option("--force", is_flag=True, help="Also a session a client is writing right now.")
@click.option("--json", "as_json", is_flag=True, help="The trashed entries as a JSON array.")
@click.pass_obj
def rm(obj: Context, sessions: tuple[str, ...], cwd: str | None, force: bool, as_json: bool) -> None:
    """Move sessions (transcript, subagent files, meta files) into the trash.

    A session being written right now, by a sessiond client or by a process
    outside sessiond (Claude Code: the file open for writing), is refused
    without --force."""
    ids = [resolved_id(obj, sid) for sid in sessions]  # canonical: lower case, no braces; prefixes and paths expanded

    def failed(sid: str, why: str) -> None:
        echo(f"sessiond: {sid}: {why}", err=True)

    root = obj.root or default_root()
    moved = trash_sessions(obj, ids, cwd, force, on_refused=failed,
                           on_trashed=None if as_json else lambda e: echo(f"trashed {_entry_line(e, trashed_named(root, e))}"))
    if as_json:
        echo_json(moved)
    if len(moved) < len(ids):
        raise SystemExit(1)


def trash_sessions(obj: Context, ids: list[str], cwd: str | None, force: bool = False, *,
                   on_trashed: Callable[[TrashEntry], object] | None = None,
                   on_refused: Callable[[str, str], object] | None = None) -> list[TrashEntry]:
    """Move the sessions (canonical ids) into the trash: what ``rm`` and the
    picker's trash key do. Each is found before any moves (not_found for one
    that is not there); a live one (a client, or Claude Code holding the file
    open for writing) is refused unless ``force``, saying why through
    ``on_refused(id, why)``. Returns the entries trashed."""
    from sessiond.store.writers import live_writer

    moved: list[TrashEntry] = []
    with _ops(obj) as ops:
        if ops.client is not None:  # what was just acknowledged may not have its file yet
            for sid in ids:
                ops.client.flush(sid)
        locs = [(sid, _find(obj, sid, cwd)) for sid in ids]  # all found before anything moves
        for sid, loc in locs:
            # A session written outside sessiond just now is refused by the daemon, whose follower
            # knows which writes were not its own; without one, a recent write may be sessiond's own
            # direct append as well as Claude Code's, and the trash gives back what rm took.
            writer = None if force else live_writer(str(loc.path))
            if writer is not None:  # Claude Code itself, writing it outside sessiond's clients
                if on_refused is not None:
                    how = (f"pid {writer['pid']} holds it open for writing" if "pid" in writer
                           else f"written {writer['secondsAgo']} s ago outside sessiond")
                    on_refused(sid, f"live: {how} (Claude Code?); --force trashes it anyway")
                continue
            try:
                entry = ops.trash(sid, Path(loc.path), force=force)
            except SessiondError as exc:
                if on_refused is not None:
                    on_refused(sid, str(exc))
                continue
            moved.append(entry)
            if on_trashed is not None:
                on_trashed(entry)
    return moved


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="The trash as a JSON array.")
@click.pass_context
def trash(ctx: click.Context, as_json: bool) -> None:
    """What is in the trash, with sizes and dates (`trash empty` deletes)."""
    if ctx.invoked_subcommand is not None:
        return
    from sessiond.store import trash as trash_mod

    obj: Context = ctx.obj
    root = obj.store_root()
    with _ops(obj):  # with no daemon, an rm or restore a kill interrupted is settled first
        found = trash_mod.entries(root)
    if as_json:
        echo_json(found)
        return
    if not found:
        echo("the trash is empty (rm and prune move sessions there)", err=True)
        return
    for e in found:
        state = "" if e.state == "trashed" else f"  [{e.state}]"
        name = trashed_named(root, e)
        echo(f"{when(e.trashedAt):>16}  {size(e.bytes):>9}  {count(e.files, 'file', 'files'):>9}  {e.reason:<5}  "
             f"{e.session}  {line_title(name.title)}  {clip_left(name.project, 40)}{state}")
    echo(f"{count(len(found), 'session')}, {size(sum(e.bytes for e in found))}", err=True)


@trash.command("empty")
@click.option("--older-than", type=Duration(), default=None, help="Only sessions trashed longer ago than this (12h, 30d, 3mo, 1y...).")
@click.option("--dry-run", is_flag=True, help="Only say what would be deleted.")
@click.option("--yes", is_flag=True, help="Delete without asking (needed when stdin is not a terminal).")
@click.option("--json", "as_json", is_flag=True, help="What was (or would be) deleted, as a JSON array.")
@click.pass_obj
def trash_empty(obj: Context, older_than: float | None, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Delete what is in the trash, for good (the only command that deletes).

    Irreversible, so it asks first on a terminal (listing what would go) and
    needs --yes otherwise; --dry-run lists the same without deleting."""
    obj.store_root()  # a --root that is not there: not "deleted 0 sessions"
    if dry_run and yes:
        raise click.UsageError("say --dry-run (look) or --yes (delete), not both")
    root = obj.root or default_root()
    with _ops(obj) as ops:
        if not dry_run and not yes:
            if not (sys.stdin.isatty() and sys.stderr.isatty()) or as_json:
                raise click.UsageError("trash empty deletes for good: say --yes (or --dry-run to see what would go)")
            if not _confirm_empty(root, ops.empty(older_than, True)):
                raise SystemExit(1)
        # Named while their transcripts are still there to say what they were.
        names = {} if as_json or dry_run else {e.name: trashed_named(root, e) for e in ops.empty(older_than, True)}
        gone = ops.empty(older_than, dry_run)
    if as_json:
        echo_json({"dryRun": dry_run, "deleted": gone, "bytes": sum(e.bytes for e in gone)})
        return
    verb = "would delete" if dry_run else "deleted"
    for e in gone:
        name = names.get(e.name) or trashed_named(root, e)
        echo(f"{verb} {_entry_line(e, name)} trashed {when(e.trashedAt)}")
    echo(f"{verb} {count(len(gone), 'session')}, {size(sum(e.bytes for e in gone))}")


def _confirm_empty(root: Path, would: list) -> bool:
    """The list a live run would delete, on stderr, and the person's yes."""
    for e in would:
        echo(f"would delete {_entry_line(e, trashed_named(root, e))}", err=True)
    if not would:
        return True  # nothing to ask about: the live run says "deleted 0 sessions"
    return click.confirm(f"delete {count(len(would), 'session')} ({size(sum(e.bytes for e in would))}) for good?",
                         default=False, err=True)


@cli.command()
@click.argument("session", metavar="ID", shell_complete=complete_trashed)
@click.option("--json", "as_json", is_flag=True, help="The restored entry as JSON.")
@click.pass_obj
def restore(obj: Context, session: str, as_json: bool) -> None:
    """Put a trashed session back where it was, byte for byte.

    ID is the whole id or a unique prefix of a trashed session's."""
    from sessiond.store.paths import check_session_id, is_session_id

    if is_session_id(session):
        session = check_session_id(session)
    else:  # a prefix: of what is in the trash, not of the store
        from sessiond.store import trash as trash_mod

        prefix = id_prefix(session)
        root = obj.root or default_root()
        trashed = {e.session: str(trashed_transcript(root, e) or "") for e in trash_mod.entries(root)
                   if e.session.startswith(prefix)}  # several: each named by its title, as the trash lists it
        session = one_of(prefix, trashed, "in the trash")
    with _ops(obj) as ops:
        entry = ops.restore(session)
    if as_json:
        echo_json(entry)
    else:
        root = obj.root or default_root()
        main = next((item.path for item in entry.items if item.path.endswith(f"/{entry.session}.jsonl")), None)
        echo(f"restored {_entry_line(entry, named(root / main if main else None, entry.project))}")
        for item in entry.items:  # where each went back, so it can be found
            echo(f"  {printable_name(str(root / item.path))}{'/' if item.kind == 'dir' else ''}")


def _scope(obj: Context, cwd: str | None, all_projects: bool) -> list[Path] | None:
    return project_scope(obj.store_root(), cwd, all_projects)


@cli.command()
@click.option("--older-than", type=Duration(), default="90d", show_default=True,
              help="Last written longer ago than this (12h, 30d, 3mo, 1y...).")
@click.option("--larger-than", type=ByteSize(), default=None, help="And larger than this (500K, 10M, 1G), subagent files included.")
@click.option("--cwd", default=None, help="The project (default: the current directory's).")
@click.option("--all", "all_projects", is_flag=True, help="Every project.")
@click.option("--dry-run", is_flag=True, help="Print what --yes would move, change nothing.")
@click.option("--yes", is_flag=True, help="Move them to the trash.")
@click.option("--json", "as_json", is_flag=True, help="What was (or would be) moved, as JSON.")
@click.pass_obj
def prune(obj: Context, older_than: float, larger_than: int | None, cwd: str | None, all_projects: bool,
          dry_run: bool, yes: bool, as_json: bool) -> None:
    """Move old (and large) sessions into the trash."""
    from sessiond.store.usage import select_prune

    if dry_run == yes:
        raise click.UsageError("say --dry-run (look) or --yes (move)")
    dirs = _scope(obj, cwd, all_projects)
    moved, skipped = [], 0
    with _ops(obj) as ops:
        scope = ops.usage(dirs).sessions if dirs != [] else []
        chosen = select_prune(scope, now=time.time(), older_than=older_than, larger_than=larger_than)
        # A live session is kept however old its last write, named on stderr,
        # so --dry-run lists exactly what --yes moves.
        live = _live(ops, chosen)
        for sid, why in live.items():
            echo(f"sessiond: kept {sid}: live: {why}", err=True)
        chosen = [s for s in chosen if s.sessionId not in live]
        names = {} if as_json else {s.sessionId: named(s.path, s.project) for s in chosen}  # before they move
        for s in chosen:
            if dry_run:
                moved.append(s)
                continue
            try:
                ops.trash(s.sessionId, Path(s.path), reason="prune")
            except SessiondError as exc:
                echo(f"sessiond: {s.sessionId}: {exc}", err=True)
                skipped += 1
                continue
            moved.append(s)
    total = sum(s.bytes for s in moved)
    if as_json:
        echo_json({"dryRun": dry_run, "sessions": moved, "bytes": total, "skipped": skipped, "live": list(live)})
    else:
        verb = "would move" if dry_run else "moved"
        for s in moved:
            name = names[s.sessionId]
            echo(f"{verb} {s.sessionId}  {line_title(name.title)}  {size(s.bytes)}  last written {when(s.lastWrite)}  "
                 f"({clip_left(name.project, 50)})")
        if not scope:
            echo(nothing_found(obj, "sessions", cwd, all_projects), err=True)
        elif not chosen and not live:
            echo(f"none of the {count(len(scope), 'session')} was last written over {older_than / 86400:g} days ago"
                 + (f" and is over {size(larger_than)}" if larger_than else "") + ": --older-than takes a shorter age",
                 err=True)
        echo(f"{verb} {count(len(moved), 'session')} ({total} bytes, {size(total)}) to the trash")
    if skipped:
        raise SystemExit(1)


def _live(ops, sessions: list) -> dict[str, str]:
    """Which of ``sessions`` are live, each with who writes it: a client of the
    daemon holding it (SPEC 7), or a process outside sessiond holding its file
    open for writing (what ``rm`` refuses without --force)."""
    from sessiond.store.writers import open_for_writing

    holders = ops.live()
    writers = open_for_writing([s.path for s in sessions if s.sessionId not in holders])
    live = {}
    for s in sessions:
        if s.sessionId in holders:
            live[s.sessionId] = holders[s.sessionId].describe(when)
        elif s.path in writers:
            live[s.sessionId] = f"pid {writers[s.path]} holds it open for writing (Claude Code?)"
    return live


@cli.command()
@click.option("--cwd", default=None, help="The project (default: the current directory's).")
@click.option("--all", "all_projects", is_flag=True, help="Every project.")
@click.option("--json", "as_json", is_flag=True, help="Bytes per project and per session as JSON.")
@click.pass_obj
def du(obj: Context, cwd: str | None, all_projects: bool, as_json: bool) -> None:
    """Bytes per project and per session, subagent files included."""
    from sessiond.wire.records import Usage

    dirs = _scope(obj, cwd, all_projects)
    with _ops(obj) as ops:
        report = ops.usage(dirs) if dirs != [] else Usage(bytes=0, files=0, projects=[], sessions=[])
    if as_json:
        echo_json(report)
        return
    if not report.sessions:
        echo(nothing_found(obj, "sessions", cwd, all_projects), err=True)
    echo(f"{size(report.bytes):>9}  total: {count(len(report.sessions), 'session')}, {count(report.files, 'file')}")
    shown = report.sessions if not all_projects else report.sessions[:20]
    names = {s.sessionId: named(s.path, s.project) for s in shown}
    one_path = {s.project: s.path for s in reversed(report.sessions)}  # a session of each project says its cwd
    for p in report.projects:
        echo(f"{size(p.bytes):>9}  {count(p.sessions, 'session'):>14}  {named(one_path.get(p.project), p.project).project}")
    if shown:
        echo("largest sessions:" if all_projects else "sessions:")
    for s in shown:
        name = names[s.sessionId]
        echo(f"{size(s.bytes):>9}  {count(s.files, 'file'):>9}  {when(s.lastWrite):>16}  {s.sessionId}  {line_title(name.title)}"
             + (f"  ({clip_left(name.project, 40)})" if all_projects else ""))


def set_metadata(obj: Context, session: str, cwd: str | None, entry: dict) -> str:
    """Append the metadata ``entry`` to the session's transcript, through the
    daemon when one serves the root, else to the file: what ``rename`` and
    ``tag`` (and the picker's rename) write. Its path."""
    from sessiond.store.lite import check_metadata

    line = msgspec.json.encode(entry)
    check_metadata(entry["type"], line)
    loc = _find(obj, session, cwd)
    with _ops(obj) as ops:
        ops.set_metadata(session, Path(loc.path), loc.cwd or where(cwd), line)
    return loc.path


def rename_session(obj: Context, session: str, title: str, cwd: str | None = None) -> str:
    """Give the session (a canonical id) the title ``title`` (not blank: the
    caller refuses that): a ``custom-title`` entry, which every listing's title
    (``title_of``) puts first. What ``rename`` and the picker's rename do. The path written."""
    return set_metadata(obj, session, cwd, {"type": "custom-title", "customTitle": title, "sessionId": session})


def tag_session(obj: Context, session: str, tag: str, cwd: str | None = None) -> str:
    """Tag the session (a canonical id) ``tag``, or untag it when ``tag`` is
    empty: a ``tag`` entry, the newest of which is the session's tag. What
    ``tag`` and the picker's tag key do. The path written."""
    return set_metadata(obj, session, cwd, {"type": "tag", "tag": tag, "sessionId": session})


def _metadata_command(name: str, value: str, kind: str, field: str, help_text: str, said) -> None:
    """``rename`` and ``tag``: one metadata entry, its value the second argument."""

    @cli.command(name, help=help_text)
    @click.argument("session", metavar="ID|PATH", shell_complete=complete_session)
    @click.argument(value)
    @click.option("--cwd", default=None, help="Project directory to look in first (default: the current directory).")
    @click.option("--json", "as_json", is_flag=True, help="The session and the file written, as JSON.")
    @click.pass_obj
    def command(obj: Context, session: str, cwd: str | None, as_json: bool, **args: str) -> None:
        text = args[value]
        session = resolved_id(obj, session)
        if kind == "custom-title":
            if not text.strip():
                raise click.UsageError("the title is empty")
            path = rename_session(obj, session, text, cwd)
        else:
            path = tag_session(obj, session, text, cwd)
        if as_json:
            echo_json({"session": session, "path": path, field: text or None})
        else:
            echo(said(session, text))


_metadata_command("rename", "title", "custom-title", "customTitle",
                  "Give a session a title (a custom-title entry, on disk when this returns).",
                  lambda sid, t: f"session {sid} is now titled {t!r}")
_metadata_command("tag", "tag", "tag", "tag", 'Tag a session (a tag entry, on disk when this returns; "" removes it).',
                  lambda sid, t: f"session {sid} tagged {t!r}" if t else f"session {sid} untagged")


trash.add_command(restore)  # `trash restore ID`, beside `trash empty`: the same command under the name people try
