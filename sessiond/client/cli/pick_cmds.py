"""``sessiond pick`` (and ``sessiond`` alone on a terminal): the interactive
picker over the sessions ``list`` lists.

This module wires the picker (``sessiond/client/picker``, the only user of
Textual, imported when the command runs) to the commands' own functions: the
listing of ``list`` (the daemon's catalog when one runs, else the files),
the conversation ``show`` renders, ``rename``'s and ``rm``'s writes. What the
person chose is done once the picker has left the screen: ``resume --claude``
(or, with ``--print``, the ``sessiond resume ID`` line printed), or ``show``.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime

import click

from . import Context, cli
from .output import echo, home_relative, local_time, printable


def activity(session) -> float:
    """When the session was last active, in seconds: its newest entry's time,
    else its file's mtime; -inf when neither reads as a time."""
    from sessiond.store.trash import parse_iso

    for iso in (session.lastEntryAt, session.modifiedAt):
        if iso:
            try:
                return parse_iso(iso)
            except (ValueError, OverflowError, OSError):
                continue
    return float("-inf")


def picker_rows(sessions: list, *, show_project: bool) -> list:
    """The picker's rows for the listed sessions, newest activity first, every
    field made printable (a title or cwd may hold terminal controls)."""
    from sessiond.store.lite import UNTITLED

    from ..picker.app import Row
    from .session_list import live_label

    today = datetime.now().astimezone().date()
    ordered = sorted(sessions, key=activity, reverse=True)
    return [Row(session=s, title=printable(" ".join((s.title or UNTITLED).split())), short_id=s.sessionId[:8],
                project=printable(home_relative(s.cwd)) if show_project and s.cwd else ("?" if show_project else ""),
                last=local_time(s.lastEntryAt or s.modifiedAt, today),
                messages="-" if s.messageCount is None else str(s.messageCount),
                live=live_label(s.live))
            for s in ordered]


class StoreActions:
    """The picker's ``Actions``: ``show``'s rendering and tokens-and-cost line, ``rename``'s and ``rm``'s writes."""

    def __init__(self, obj: Context, cwd: str | None) -> None:
        self.obj = obj
        self.cwd = cwd

    def preview(self, session) -> str:
        from pathlib import Path

        from sessiond.client.resume.pipeline import load_transcript

        from .transcript_view import render

        return render(load_transcript(Path(session.path)), color=False)

    def spend(self, session) -> str:
        from pathlib import Path

        from .spend_view import spend_line, spend_of

        return spend_line(spend_of(Path(session.path)))

    def rename(self, session, title: str) -> None:
        from .lifecycle_cmds import rename_session

        rename_session(self.obj, session.sessionId, title, self.cwd)

    def trash(self, session) -> str | None:
        from .lifecycle_cmds import trash_sessions

        refusals: list[str] = []
        trash_sessions(self.obj, [session.sessionId], self.cwd,
                       on_refused=lambda sid, why: refusals.append(why))
        return refusals[0] if refusals else None


def open_picker(obj: Context, cwd: str | None, all_projects: bool, print_only: bool) -> None:
    """List the sessions, run the picker, then do what was chosen."""
    from .session_list import find_sessions

    sessions = find_sessions(obj, cwd, all_projects)
    here = home_relative(os.path.abspath(cwd) if cwd else os.getcwd())
    scope = "every project" if all_projects else f"project {here} (--all: every project)"
    if not sessions and not all_projects:  # nothing here: every project's, saying so, rather than an empty list
        all_projects = True
        sessions = find_sessions(obj, None, True)
        scope = f"every project (none in {here})"
    from ..picker.app import PickerApp

    app = PickerApp(picker_rows(sessions, show_project=all_projects), StoreActions(obj, cwd), show_project=all_projects,
                    scope=printable(scope))
    choice = app.run()
    if choice is None:
        return
    from . import resume_cmds

    ctx = click.get_current_context()
    if choice.action == "show":
        ctx.invoke(resume_cmds.show, target=choice.session_id, cwd=cwd, as_json=False, wide=False, history=False,
                   all_entries=False, no_pager=False)
    elif print_only:
        echo(f"sessiond resume {choice.session_id}")
    else:
        ctx.invoke(resume_cmds.resume, session_id=choice.session_id, cwd=cwd, as_json=False, in_claude=True,
                   all_entries=False, no_pager=False, take_over=False, fork_it=False)


@cli.command()
@click.option("--cwd", default=None, help="The project (default: the current directory's).")
@click.option("--all", "all_projects", is_flag=True, help="Every project's sessions (with a project column).")
@click.option("--print", "print_only", is_flag=True,
              help="Enter prints the `sessiond resume ID` line instead of opening the session in Claude Code.")
@click.pass_obj
def pick(obj: Context, cwd: str | None, all_projects: bool, print_only: bool) -> None:
    """Pick a session interactively: type to filter, Enter resumes it in Claude Code.

    The project's sessions (--all, or when it has none: every project's),
    newest activity first, filtered as you type by title (typos forgiven)
    and id prefix, the highlighted one's conversation beside them. On the list (Tab): Enter
    resume, s show, r rename, d move to the trash (asks first), q or Escape
    quit. Needs a terminal; `sessiond` alone on a terminal opens it too."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise click.UsageError("pick needs a terminal (stdin and stdout); `sessiond list` prints the sessions")
    open_picker(obj, cwd, all_projects, print_only)
