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
from pathlib import Path

import click

from sessiond.store.listing import last_activity

from . import Context, cli
from .output import echo, home_relative, local_time, printable, project_label, size

SEARCH_LIMIT = 200
"""Sessions a search from the picker brings at most (the best-ranked)."""


FIRST_PAGE = 80
"""Sessions read for the first screen (newest activity first, from the files:
a page of them is a few dozen reads), shown while the whole listing is read."""


def picker_rows(sessions: list, *, show_project: bool, here: list[Path] | None = None) -> list:
    """The picker's rows for the listed sessions (``find_sessions``: newest
    activity first), every field made printable (a title or cwd may hold
    terminal controls); with ``here`` (the cwd's project dirs), its sessions first."""
    from sessiond.store.lite import UNTITLED

    from ..picker.rows import Row
    from .session_list import live_label

    if here:
        dirs = {str(d) for d in here}
        sessions = sorted(sessions, key=lambda s: os.path.dirname(s.path) not in dirs)  # stable: activity within
    today = datetime.now().astimezone().date()
    return [Row(session=s, title=printable(" ".join((s.title or UNTITLED).split())), short_id=s.sessionId[:8],
                project=project_label(s.cwd),
                last=local_time(last_activity(s), today),
                messages="-" if s.messageCount is None else str(s.messageCount),
                live=live_label(s.live), tag=printable(" ".join((s.tag or "").split())),
                forked_from=s.forkedFrom or "")
            for s in sessions]


class StoreActions:
    """The picker's ``Actions``: the functions of ``show`` (rendering, tokens
    and cost), ``search``, ``export``, ``rename``, ``tag``, ``fork`` and ``rm``."""

    def __init__(self, obj: Context, cwd: str | None, all_projects: bool = False) -> None:
        self.obj = obj
        self.cwd = cwd
        self.all_projects = all_projects
        """Whether searches cover every project (set when the picker falls back to every project)."""
        self.show_project = all_projects

    def preview(self, session) -> str:
        from sessiond.client.resume.pipeline import load_transcript

        from .transcript_view import render

        return render(load_transcript(Path(session.path)), color=False)

    def spend(self, session) -> str:
        from .spend_view import spend_line, spend_of

        return spend_line(spend_of(Path(session.path)))

    def search(self, text: str) -> list[tuple[str, str]]:
        from .locate import project_scope
        from .search_cmds import find_hits

        root = self.obj.store_root()
        dirs = project_scope(root, None if self.all_projects else self.cwd, self.all_projects)
        hits, _ = find_hits(self.obj, root, text, dirs, SEARCH_LIMIT)  # its notes are for a terminal, not the list
        return [(h.sessionId, printable(" ".join(h.snippet.split()))) for h in hits]

    def rename(self, session, title: str) -> None:
        from .lifecycle_cmds import rename_session

        rename_session(self.obj, session.sessionId, title, self.cwd)

    def tag(self, session, tag: str) -> None:
        from .lifecycle_cmds import tag_session

        tag_session(self.obj, session.sessionId, tag, self.cwd)

    def fork(self, session):
        from sessiond.store.lite import read_lite

        from .locate import locate
        from .resume_cmds import fork_session

        new_id, _, _, cwd = fork_session(self.obj, session.sessionId, None)
        path, _ = locate(self.obj, new_id, cwd)
        return picker_rows([read_lite(path).session_info()], show_project=self.show_project)[0]

    def export(self, session, fmt: str) -> str:
        """The ``export`` command itself, run with ``-o ./<id8>.html`` (or
        ``.md``) and ``--force`` (a second export of a session replaces the
        first); what it would say on stderr goes to Textual's capture."""
        from .transfer_cmds import export

        target = Path(f"{session.sessionId[:8]}.{'html' if fmt == 'html' else 'md'}").absolute()
        with click.Context(export, obj=self.obj) as ctx:
            try:
                ctx.invoke(export, session=session.sessionId, cwd=self.cwd, fmt=fmt, output=target, force=True,
                           no_redact=False)
            except SystemExit as exc:  # a refusal the command said on stderr (exit 2): said here in its place
                raise ValueError(f"export refused it (exit {exc.code})") from None
        return f"exported {session.sessionId[:8]} to {home_relative(str(target))} ({size(target.stat().st_size)})"

    def trash(self, session) -> str | None:
        from .lifecycle_cmds import trash_sessions

        refusals: list[str] = []
        trash_sessions(self.obj, [session.sessionId], self.cwd,
                       on_refused=lambda sid, why: refusals.append(why))
        return refusals[0] if refusals else None


def _scope_line(all_projects: bool, here: str, none_here: bool) -> str:
    if none_here:
        return printable(f"every project (none in {here})")
    return printable("every project, this one first" if all_projects else f"project {here} (--all: every project)")


def first_page(obj: Context, cwd: str | None, all_projects: bool):
    """The first screen's ``Listing``: the newest sessions of the project (or,
    with none there, of every project), read from the files (reading stops
    at the page: ``listing.list_sessions``), for the picker to show while the
    whole listing is read."""
    from sessiond.store import listing, project_dirs

    from ..picker.app import Listing

    root = obj.store_root()
    where = os.path.abspath(cwd) if cwd else os.getcwd()
    here = project_dirs.listing_dirs(root, where)
    sessions = listing.list_sessions(here, limit=FIRST_PAGE) if here else []
    none_here = not sessions and not all_projects
    if all_projects or none_here:
        sessions = sessions or listing.list_all_sessions(root, limit=FIRST_PAGE)
    show = all_projects or none_here
    return Listing(picker_rows(sessions, show_project=show, here=here if show else None), show,
                   _scope_line(all_projects, home_relative(where), none_here))


def whole_listing(obj: Context, cwd: str | None, all_projects: bool, actions: StoreActions | None = None):
    """The picker's whole ``Listing``: what ``list`` lists (the daemon's
    catalog when one runs, else the files), the cwd's project first; every
    project's when the project has none (``actions`` then searches them all)."""
    from sessiond.store import project_dirs

    from ..picker.app import Listing
    from .session_list import find_sessions

    where = os.path.abspath(cwd) if cwd else os.getcwd()
    sessions = find_sessions(obj, cwd, all_projects)
    none_here = not sessions and not all_projects
    if none_here:  # nothing here: every project's, saying so, rather than an empty list
        sessions = find_sessions(obj, None, True)
        if actions is not None:
            actions.all_projects = actions.show_project = True
    show = all_projects or none_here
    here = project_dirs.listing_dirs(obj.store_root(), where) if show else None
    return Listing(picker_rows(sessions, show_project=show, here=here), show,
                   _scope_line(all_projects, home_relative(where), none_here))


def open_picker(obj: Context, cwd: str | None, all_projects: bool, print_only: bool) -> None:
    """Show the first page, read the rest behind it, run the picker, then do what was chosen."""
    from ..picker.app import PickerApp
    from .locate import check_scope

    check_scope(cwd, all_projects)
    actions = StoreActions(obj, cwd, all_projects)
    first = first_page(obj, cwd, all_projects)
    actions.all_projects = actions.show_project = first.show_project
    app = PickerApp(first.rows, actions, show_project=first.show_project, scope=first.scope,
                    more=lambda: whole_listing(obj, cwd, all_projects, actions))
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

    The project's sessions (--all, or when it has none: every project's, this
    one's first), newest activity first, forks under the session they came
    from, live ones marked ●. Typing filters by title (typos forgiven), id
    prefix, #tag and @project, and, once you pause, by the conversations'
    text (ranked search). The highlighted one's conversation is beside them.
    On the list (Tab): Enter resume in Claude Code, s show, r rename, t tag,
    f fork, e export HTML (E Markdown) to ./ID.html, d move to the trash
    (asks first), q or Escape quit. Needs a terminal; `sessiond` alone on a
    terminal opens it too."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise click.UsageError("pick needs a terminal (stdin and stdout); `sessiond list` prints the sessions")
    open_picker(obj, cwd, all_projects, print_only)
