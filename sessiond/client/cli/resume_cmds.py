"""show, resume, continue and fork (SPEC 4).

``show`` reads the file itself and never needs a daemon. ``resume`` and
``continue`` first ask the daemon to flush the session (so everything already
acknowledged is in the file), load it, then have the daemon adopt the file:
later appends go to it and its metadata is re-appended at EOF. A session of
another repository is not resumed in place: the command to run there is printed.
``fork`` copies the resumed chain into a new session id; the old file is untouched.
A session id that is not local is pulled from the remote mirror first, when one
is configured (the same as ``sessiond pull``). ``tail`` and ``watch`` print a
transcript's last entries and, with ``following``, the new ones as they come.
"""

from __future__ import annotations

import os
import sys
import uuid as uuidlib
from pathlib import Path

import click

from sessiond.store.locations import default_root
from sessiond.wire.errors import SessiondError, not_found
from sessiond.wire.lease import LeaseHolder

from . import Context, cli
from .completion import complete_session
from .locate import locate, resolve, where
from .locate import session_id as resolved_id
from .output import count, echo, echo_json, paged, printable, printable_name, shell_word, skipped_lines, when
from .transcript_view import reading_options


def _print(result, as_json: bool, *, all_entries: bool = False, pager: bool = True, footer: str = "",
           history: list[dict] | None = None, spend=None, width: int | None = None, color: str = "auto",
           full: bool = False) -> None:
    """JSON for programs; for a person the rendered conversation (then
    ``footer``), in colour on a terminal (unless ``NO_COLOR``), through
    ``$PAGER`` (``less`` by default, ``LESS=FRX`` unless set) when it is longer
    than the screen. ``history``: the entries before the last compaction
    (``show --history``), first, marked; in JSON a ``history`` key. ``spend``
    (``show``): the session's tokens and cost (``spend_view``), a header line,
    in JSON the ``tokens``, ``costUSD`` and ``unpricedModels`` keys.
    ``width``, ``color``, ``full``: see ``transcript_view.reading_options``."""
    if as_json:
        if history is None and spend is None:
            echo_json(result)
        else:
            import msgspec

            from .spend_view import spend_fields

            extra = {} if spend is None else spend_fields(spend)
            echo_json({**msgspec.to_builtins(result), **({} if history is None else {"history": history}), **extra})
        return
    from .transcript_view import colour, render

    on = colour(color)

    line = None
    if spend is not None:
        from .spend_view import spend_line

        line = spend_line(spend)
    text = render(result, all_entries=all_entries, color=on, history=history, spend=line, width=width,
                  full=full) + (f"\n{printable(footer)}" if footer else "")
    # rendered: its fields are printable, its styles ours
    paged(text if on else click.unstyle(text), color=on, pager=pager)


def view_options(f):
    """How a conversation is shown to a person (show, resume, continue)."""
    f = click.option("--no-pager", "no_pager", is_flag=True, help="Never page the output (default: $PAGER or less on a terminal).")(f)
    f = click.option("--all-entries", is_flag=True,
                     help="Show the bookkeeping too: attachments, system entries, progress, file snapshots "
                          "(by default counted).")(f)
    return f


def refuse_unusable(path: Path, result) -> None:
    """A file that holds no conversation (empty, not a transcript, summaries or
    metadata only) is an error in one line, not an empty "session ?"."""
    if result.chain:
        return
    from sessiond.client.health import check_file

    h = check_file(path)
    if h.bytes == 0 or h.lines == 0:
        raise SessiondError(f"{path} is empty: no transcript entries", code="bad_request")
    if len(h.unparseableLines) + h.tornTail >= h.lines:
        raise SessiondError(f"{path} is not a transcript: none of its {h.lines} lines is a transcript entry", code="bad_request")
    raise SessiondError(f"{path} holds no conversation: {h.lines} entries but no user or assistant message", code="bad_request")


def report_skipped(path: Path, skipped: int, session: str | None = None) -> None:
    """Lines no reader could use, in one summary line; they make the exit 1. A
    torn last line (a writer died mid-line) says the command that sets it aside."""
    if not skipped:
        return
    from sessiond.client.health import check_file

    h = check_file(path)
    numbers = h.unparseableLines + ([h.lines] if h.tornTail else [])
    text = skipped_lines(numbers) if len(numbers) == skipped else f"{count(skipped, 'line')} skipped"
    torn = ""
    if h.tornTail:
        torn = f"; the last line is torn (a writer died mid-line): `sessiond repair {session or shell_word(str(path))}` moves it to a .torn file"
    echo(f"sessiond: {text} of {printable_name(str(path))}: unreadable{torn}", err=True)
    sys.exit(1)


@cli.command()
@click.argument("target", metavar="ID|PATH", shell_complete=complete_session)
@click.option("--cwd", default=None, help="Project directory to look in first (default: the current directory).")
@click.option("--json", "as_json", is_flag=True, help="The resumed conversation as one JSON object.")
@click.option("--bridge", "wide", is_flag=True,
              help="Repair: join the part before a missing parent that Claude Code leaves out (more than 5 s older).")
@click.option("--history", is_flag=True,
              help="Also the conversation before the last compaction (marked; a resume does not restore it).")
@view_options
@reading_options
@click.pass_obj
def show(obj: Context, target: str, cwd: str | None, as_json: bool, wide: bool, history: bool, all_entries: bool,
         no_pager: bool, width: int | None = None, color: str = "auto", full: bool = False) -> None:
    """Show the conversation a resume would restore (never starts a daemon).

    Where a parent line is missing, the conversation is joined as Claude Code
    joins it (to an entry at most 5 s older) or starts after the gap; the
    output says so, and `--bridge` joins the earlier part too (a repair,
    named in the output). Exit 1 when the file holds no conversation (empty,
    not a transcript, metadata only) or had unreadable lines (counted in one
    line on stderr)."""
    from sessiond.client.resume.pipeline import load_transcript

    path, loc = locate(obj, target, cwd)
    result = load_transcript(path, wide=wide)
    refuse_unusable(path, result)
    hint = loc.resume_hint() if loc is not None else None
    if hint is not None:
        echo(f"sessiond: session of another project; to resume it: {hint}", err=True)
    stored = _in_store(obj, path)
    sid = loc.session_id if loc is not None else result.sessionId
    footer = ""
    if sid:
        first = "" if stored else f"sessiond import {shell_word(str(path))} && {_cd_to_its_project(path, cwd)}"
        footer = f"to resume it: {hint or f'{first}sessiond resume {sid}'}"  # resume finds sessions of the store
    before = None
    if history:
        from sessiond.client.resume.history import pre_compaction

        before = pre_compaction(path)
    from .spend_view import spend_of

    _print(result, as_json, all_entries=all_entries, pager=not no_pager, footer=footer, history=before,
           spend=spend_of(path), width=width, color=color, full=full)
    report_skipped(path, result.skippedLines, sid if stored else None)


def _cd_to_its_project(path: Path, cwd: str | None) -> str:
    """``cd <cwd> && `` when the file's recorded cwd is another project than the
    one the command runs in: ``import`` puts it in the project its cwd names,
    and ``resume`` there finds it (from elsewhere it refuses another project's)."""
    from sessiond.store.lite import read_lite
    from sessiond.store.paths import canonical_cwd, sanitize

    try:
        recorded = read_lite(path).cwd
    except OSError:
        return ""
    if not recorded or not os.path.isabs(recorded):
        return ""
    if sanitize(canonical_cwd(recorded)) == sanitize(canonical_cwd(where(cwd))):
        return ""
    return f"cd {shell_word(recorded)} && "


def _in_store(obj: Context, path: Path) -> bool:
    """Whether ``path`` is a transcript of the store (what an id finds)."""
    from sessiond.store.paths import projects_dir

    base = os.path.realpath(projects_dir(obj.root or default_root())) + os.sep
    return os.path.realpath(path).startswith(base)


def _live_options(f):
    f = click.option("--fork", "fork_it", is_flag=True,
                     help="Leave the session alone (even if live) and fork it: prints the new session id.")(f)
    return click.option("--take-over", is_flag=True,
                        help="Take the session from the client writing it: its acknowledged entries are written "
                             "first, and it is refused from then on.")(f)


def _claude_option(f):
    return click.option("--claude", "in_claude", is_flag=True,
                        help="Open it in Claude Code: `claude --resume ID` in the session's own directory, its file "
                             "placed into Claude Code's projects dir first when the store is elsewhere.")(f)


@cli.command()
@click.argument("session_id", metavar="ID|PATH", shell_complete=complete_session)
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--json", "as_json", is_flag=True, help="The resumed conversation as one JSON object.")
@_claude_option
@view_options
@_live_options
@click.pass_obj
def resume(obj: Context, session_id: str, cwd: str | None, as_json: bool, in_claude: bool, all_entries: bool,
           no_pager: bool, take_over: bool, fork_it: bool) -> None:
    """Resume a session: show it and make the daemon adopt its file.

    Exit 4 when another client is writing it (the session is live): stderr names
    its pid; --take-over takes it, --fork continues in a copy. With --claude,
    Claude Code resumes it instead (--fork --claude: the fork)."""
    if in_claude:
        if fork_it:
            click.get_current_context().invoke(fork, target=session_id, cwd=cwd, as_json=False, in_claude=True)
            return
        path, _ = locate(obj, resolved_id(obj, session_id), cwd)
        _hand_to_claude(obj, path)
        return
    _resume(obj, resolved_id(obj, session_id), cwd, as_json, take_over, fork_it, all_entries=all_entries,
            pager=not no_pager)


def _hand_to_claude(obj: Context, path: Path, session: str | None = None) -> None:
    """Place the session where Claude Code reads it (saying so), then run
    ``claude --resume ID`` in its directory, or say in one line how to."""
    from sessiond.client import claude_handoff
    from sessiond.store.paths import is_session_id

    sid = session or path.name.removesuffix(".jsonl")
    if not is_session_id(sid):
        raise SessiondError(f"{printable_name(str(path))} is not named by a session id: import it first (`sessiond import {shell_word(str(path))}`)",
                            code="bad_request")
    h = claude_handoff.prepare(path, sid)
    if h.placed:
        echo(f"sessiond: placed {count(len(h.placed), 'file')} of session {sid} into {os.path.dirname(h.path)} "
             "(byte for byte), where Claude Code reads it", err=True)
    program = claude_handoff.program_path(h.command[0])
    if program is None:
        echo(f"sessiond: `{h.command[0]}` is not on PATH; to resume it in Claude Code: {h.by_hand()}", err=True)
        sys.exit(1)
    if not os.path.isdir(h.cwd):
        echo(f"sessiond: {h.cwd} (the session's directory) does not exist here; Claude Code resumes it only "
             f"from there: {h.by_hand()}", err=True)
        sys.exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(h.cwd)
    os.execv(program, h.command)


@cli.command("continue")
@click.option("--cwd", default=None, help="Project directory (default: the current directory).")
@click.option("--json", "as_json", is_flag=True, help="The resumed conversation as one JSON object.")
@view_options
@_live_options
@click.pass_obj
def continue_cmd(obj: Context, cwd: str | None, as_json: bool, all_entries: bool, no_pager: bool, take_over: bool,
                 fork_it: bool) -> None:
    """Resume the most recent session of the project."""
    from sessiond.client import lookup
    from sessiond.store import listing

    here = where(cwd)
    dirs = lookup.listing_dirs(obj.root or default_root(), here)
    latest = listing.list_sessions(dirs, limit=1) if dirs else []
    if not latest:
        from .hints import nothing_found

        raise not_found(nothing_found(obj, "session to continue", here, False, "sessiond list --all shows"))
    _resume(obj, latest[0].sessionId, here, as_json, take_over, fork_it, all_entries=all_entries, pager=not no_pager)


EXIT_BUSY = 4
"""``resume``/``continue`` of a session another client is writing."""


def _resume(obj: Context, session_id: str, cwd: str | None, as_json: bool, take_over: bool = False,
            fork_it: bool = False, **view) -> None:
    """Flush, adopt, load. This process only loads: it checks that nobody holds
    the session (exit 4) rather than claim it; the agent that goes on writing
    claims it. ``take_over`` takes it from its holder and leaves it free for
    that agent; the daemon answers once the old holder's acknowledged entries
    are in the file, so the load sees all of them, and the old holder is
    refused from then on. ``fork_it`` leaves it alone and forks it."""
    from sessiond.client.resume.pipeline import load_transcript
    from sessiond.wire import messages as m
    from sessiond.wire.errors import SessionBusy

    if take_over and fork_it:
        raise click.UsageError("--take-over and --fork exclude each other")
    if fork_it:  # fork flushes the session first: its acknowledged entries are in the copy
        click.get_current_context().invoke(fork, target=session_id, cwd=cwd, as_json=as_json)
        return
    with obj.client() as client:
        # Flush before the lookup: a session whose first entries were only just
        # acknowledged (even as `queued`) may not have its file yet.
        client.flush(session_id)  # everything acknowledged so far is in the file
        path, loc = locate(obj, session_id, cwd)
        if loc is not None and not loc.same_repo:
            hint = loc.resume_hint()
            echo(f"sessiond: session {session_id} belongs to another project; run:\n  {hint}", err=True)
            sys.exit(1)
        try:
            client.call(m.Adopt(id=client.next_id(), session=session_id, path=str(path), take_over=take_over,
                                refuse_live=True))
        except SessionBusy as exc:
            holder = exc.holder
            who = holder.describe(when) if isinstance(holder, LeaseHolder) else "another client"
            echo(f"sessiond: session {session_id} is live: written by {who}.\n"
                 f"  sessiond resume {session_id} --take-over   # take it (that client is refused from then on)\n"
                 f"  sessiond resume {session_id} --fork        # continue in a copy", err=True)
            sys.exit(EXIT_BUSY)
        result = load_transcript(path)
        refuse_unusable(path, result)
    _print(result, as_json, **view)


@cli.command()
@click.argument("target", metavar="ID|PATH", shell_complete=complete_session)
@click.option("--cwd", default=None, help="Where the fork works: its project dir and recorded cwd (default: the original's).")
@click.option("--json", "as_json", is_flag=True, help="The new id, the source id, the message count and the cwd as one JSON object.")
@_claude_option
@click.pass_obj
def fork(obj: Context, target: str, cwd: str | None, as_json: bool, in_claude: bool = False) -> None:
    """Start a new session seeded with the old one's chain; prints the new id
    (--claude: then opens the fork in Claude Code, never stranded where
    `claude --resume` cannot see it)."""
    new_id, source_id, messages, session_cwd = fork_session(obj, target, cwd)
    if as_json:
        echo_json({"sessionId": new_id, "forkedFrom": source_id, "messages": messages, "cwd": session_cwd})
    else:
        echo(new_id)
    if in_claude:
        forked, _ = locate(obj, new_id, session_cwd)
        _hand_to_claude(obj, forked, new_id)


def fork_session(obj: Context, target: str, cwd: str | None) -> tuple[str, str | None, int, str]:
    """Fork the session ``target`` (an id, a prefix or a path): a new session
    seeded with its chain, each entry carrying ``forkedFrom``, working in
    ``cwd`` (default: the original's). What ``fork`` and the picker's fork key
    do. (new id, the original's id, entries copied, the fork's cwd)."""
    from sessiond.client.resume.pipeline import load_transcript
    from sessiond.store.reencode import encode_entry
    from sessiond.wire import messages as m

    with obj.client() as client:
        named = resolve(obj, target)
        if isinstance(named, str):  # acknowledged as queued, it may have no file before the next drain
            client.flush(named)
            target = named
        path, loc = locate(obj, target, cwd)
        result = load_transcript(path)
        refuse_unusable(path, result)
        entries = fork_entries(path, result.chain)
        if not entries:
            raise SessiondError(f"{path} has no conversation to fork", code="bad_request")
        new_id = str(uuidlib.uuid4())
        # --cwd says where the fork works: its project dir, and the cwd its entries
        # record (so list and resume there find it in place). Else the original's.
        session_cwd = where(cwd) if cwd else (loc.cwd if loc is not None and loc.cwd else None) or entries[0].get("cwd") or where(None)
        for e in entries:
            e["sessionId"] = new_id
            # Where it came from, on every copied entry (the head window that
            # list reads sees the first): the origin and the entry itself.
            e["forkedFrom"] = {"sessionId": result.sessionId, "messageUuid": e.get("uuid")}
            if cwd:
                e["cwd"] = session_cwd
        lines = [encode_entry(e) for e in entries]
        for i in range(0, len(lines), 256):
            client.call(m.Append(id=client.next_id(), session=new_id, cwd=session_cwd, entries=lines[i : i + 256], durability="written"))
        client.call(m.Close(id=client.next_id(), session=new_id))
    return new_id, result.sessionId, len(entries), session_cwd


def fork_entries(path: Path, chain: list[str]) -> list[dict]:
    """The chain's original entries (last occurrence of each uuid, as the loader
    keeps), relinked one after the other so the fork resumes to the same chain."""
    from sessiond.store.entries import try_header
    from sessiond.store.jsonl import iter_lines
    from sessiond.store.reencode import decode_entry

    wanted = set(chain)
    raw: dict[str, bytes] = {}
    for line in iter_lines(path):
        h = try_header(line)
        if h is not None and h.uuid in wanted:
            raw[h.uuid] = line
    out = []
    parent = None
    for uid in chain:
        if uid not in raw:
            continue
        e = decode_entry(raw[uid])  # lone surrogates and out-of-range numbers kept as written
        e.pop("logicalParentUuid", None)
        e = {"parentUuid": parent, **{k: v for k, v in e.items() if k != "parentUuid"}}
        out.append(e)
        parent = uid
    return out
