"""The picker's Textual application: a filter line, the sessions' table, the
selected session's conversation, and the keys that act on it.

What it shows and does to the store comes from outside (``Actions``, built by
the ``pick`` command from the functions ``list``, ``show``, ``rename`` and
``rm`` use); the app decides only what a person sees and which key does what.
Transcript text is data: every cell and the preview are ``rich.text.Text``
(never parsed as markup) of text already made printable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Label, Static

from .matching import Matcher

PREVIEW_LINES = 400
"""The preview shows the conversation's last this many lines (``s`` shows all)."""

BATCH = 200
LIVE_MARK = "● "
"""Before the title of a session written right now (``Row.live`` says by whom)."""
"""Rows put into the table at a time: the first batch of what the filter keeps,
the next when the cursor comes near the end. A table of 10,000 rows costs
seconds to fill; a keystroke must not."""


class Actions(Protocol):
    """What the picker does to the store, through the commands' own functions."""

    def preview(self, session: Any) -> str:
        """The session's conversation as plain printable text (``show``'s)."""

    def spend(self, session: Any) -> str:
        """The session's tokens and cost in one printable line (``show``'s header line)."""

    def rename(self, session: Any, title: str) -> None:
        """Give the session ``title`` (``rename``'s); raise to refuse."""

    def trash(self, session: Any) -> str | None:
        """Move the session to the trash (``rm``'s): None, or why it was not."""


@dataclass(frozen=True)
class Row:
    """One session's cells, as the table shows them (made printable by the caller)."""

    session: Any
    """The listed session (``SessionInfo``)."""
    title: str
    short_id: str
    project: str
    last: str
    messages: str
    live: str = ""
    """Who writes the session right now (a client holding its lease, or another
    process holding the file open for writing: ``pid N``), empty when nobody does."""


@dataclass(frozen=True)
class Choice:
    """What the person chose on leaving: ``resume`` or ``show`` a session id."""

    action: str
    session_id: str


class RenameScreen(ModalScreen[str | None]):
    """The new title for a session: Enter gives it, Escape gives None."""

    DEFAULT_CSS = """
    RenameScreen { align: center middle; }
    RenameScreen > Vertical { width: 80%; height: auto; border: round $accent; padding: 0 1; background: $surface; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("New title (Enter renames, Escape cancels):", markup=False)
            yield Input(value=self.current, id="title")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question: y confirms, n or Escape does not."""

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 80%; height: auto; border: round $error; padding: 0 1; background: $surface; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
        Binding("escape", "answer(False)", "no", show=False),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question, markup=False)
            yield Label("y: yes   n: no", markup=False)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class SessionTable(DataTable):
    """The sessions, one row each; its keys act on the selected one. A
    printable key that is not one of them goes to the filter."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "app.resume", "resume"),
        Binding("s", "app.show", "show"),
        Binding("r", "app.rename", "rename"),
        Binding("d", "app.trash", "trash"),
        Binding("q", "app.quit", "quit"),
        Binding("slash", "app.focus_filter", "filter", show=False),
    ]

    def on_key(self, event: events.Key) -> None:
        if event.is_printable and event.character and event.key not in ("s", "r", "d", "q", "slash", "space"):
            event.stop()
            self.app.query_one("#filter", Input).insert_text_at_cursor(event.character)
            self.app.query_one("#filter", Input).focus()


class PickerApp(App[Choice | None]):
    """The picker: ``rows`` (newest activity first) filtered as one types, the
    highlighted session's conversation in the preview. Exits with a ``Choice``
    (Enter: resume, ``s``: show) or None (``q``, Escape)."""

    TITLE = "sessiond"
    CSS = """
    #filter { dock: top; }
    #status { dock: bottom; height: 1; width: 100%; color: $text-muted; }
    #sessions { width: 3fr; }
    #preview-pane { width: 2fr; border-left: solid $primary; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "quit", "quit", priority=True),
        Binding("down", "move(1)", show=False), Binding("up", "move(-1)", show=False),
        Binding("pagedown", "move(10)", show=False), Binding("pageup", "move(-10)", show=False),
        Binding("tab", "focus_table", "keys (s r d q)", show=True),
    ]

    def __init__(self, rows: list[Row], actions: Actions, *, show_project: bool, scope: str) -> None:
        super().__init__()
        self.rows = rows
        self.actions = actions
        self.show_project = show_project
        self.scope = scope
        self.shown: list[int] = []
        self._matcher = self._index()
        self._previewed: str | None = None

    def _index(self) -> Matcher:
        return Matcher([r.title for r in self.rows], [r.session.sessionId for r in self.rows])

    def compose(self) -> ComposeResult:
        yield Input(placeholder="type to filter: title words (typos forgiven) or an id prefix", id="filter")
        with Horizontal():
            yield SessionTable(id="sessions", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="preview-pane"):
                yield Static(id="preview", markup=False)
        yield Static(id="status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(SessionTable)
        others = 10 + 17 + 5 + (29 if self.show_project else 0)  # id, time, count, project, and gaps
        title_width = max(16, int(self.size.width * 0.6) - others)
        table.add_column("TITLE", width=title_width, key="title")
        table.add_column("ID", width=8, key="id")
        if self.show_project:
            table.add_column("PROJECT", width=28, key="project")
        table.add_column("LAST ACTIVITY", width=16, key="last")
        table.add_column("MSGS", width=5, key="msgs")
        self.refilter()
        self.query_one("#filter", Input).focus()

    # ---------------------------------------------------------------- listing

    def refilter(self) -> None:
        """Show the rows the filter keeps, the cursor on the first."""
        query = self.query_one("#filter", Input).value
        self.shown = self._matcher.filter(query)
        table = self.query_one(SessionTable)
        table.clear()
        table.add_rows(self._cells(self.rows[i]) for i in self.shown[:BATCH])
        what = f"{len(self.shown)} of {len(self.rows)} sessions" if query.strip() else f"{len(self.rows)} sessions"
        self.query_one("#status", Static).update(Text(f"{what} · {self.scope}"), layout=False)  # its size is fixed
        if self.shown:
            table.move_cursor(row=0)
            self.preview_selected()
        else:
            self._previewed = None
            self.query_one("#preview", Static).update(Text("no session matches" if self.rows else "no sessions"))

    def _cells(self, row: Row) -> list[Text]:
        cells = [row.title, row.short_id] + ([row.project] if self.show_project else []) + [row.last, row.messages]
        out = [Text(c, no_wrap=True, overflow="ellipsis", justify="right" if i == len(cells) - 1 else "left")
               for i, c in enumerate(cells)]
        if row.live:  # written right now: a marker before the title (the status line says by whom)
            out[0] = Text.assemble((LIVE_MARK, "bold green"), out[0], no_wrap=True, overflow="ellipsis")
        return out

    def selected(self) -> Row | None:
        """The highlighted row, if any."""
        table = self.query_one(SessionTable)
        if not self.shown or not 0 <= table.cursor_row < len(self.shown):
            return None
        return self.rows[self.shown[table.cursor_row]]

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.refilter()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.action_resume()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._fill(event.cursor_row)
        self.preview_selected()

    def _fill(self, cursor: int) -> None:
        """The next batch of rows when ``cursor`` comes near the table's end."""
        table = self.query_one(SessionTable)
        have = table.row_count
        if cursor >= have - 20 and have < len(self.shown):
            table.add_rows(self._cells(self.rows[i]) for i in self.shown[have:have + BATCH])

    def action_move(self, by: int) -> None:
        table = self.query_one(SessionTable)
        if self.shown:
            target = max(0, min(len(self.shown) - 1, table.cursor_row + by))
            self._fill(target)
            table.move_cursor(row=min(target, table.row_count - 1))

    def action_focus_table(self) -> None:
        self.query_one(SessionTable).focus()

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    # ---------------------------------------------------------------- preview

    def preview_selected(self) -> None:
        row = self.selected()
        if row is None or row.session.sessionId == self._previewed:
            return
        self._previewed = row.session.sessionId
        who = f"live: {row.live}\n" if row.live else ""
        self.query_one("#preview", Static).update(Text(f"{row.title}\n{who}\nloading…"))
        self._load_preview(row)

    @work(thread=True, exclusive=True, group="preview")
    def _load_preview(self, row: Row) -> None:
        """The conversation's last lines under the session's tokens and cost,
        both read here, in the preview's thread, for this session alone."""
        try:
            text = self.actions.preview(row.session)
        except Exception as exc:  # a file gone or unreadable: said in the pane, the picker goes on
            text = f"cannot show this session: {exc}"
        lines = text.splitlines()
        if len(lines) > PREVIEW_LINES:
            text = "\n".join([f"… {len(lines) - PREVIEW_LINES} earlier lines (s shows them all)", *lines[-PREVIEW_LINES:]])
        try:
            spent = self.actions.spend(row.session)
        except Exception as exc:  # as above: said, not a crash
            spent = f"tokens not counted: {exc}"
        text = f"{spent}\n{text}"
        self.call_from_thread(self._show_preview, row.session.sessionId, text)

    def _show_preview(self, session_id: str, text: str) -> None:
        row = self.selected()
        if row is not None and row.live and row.session.sessionId == session_id:
            text = f"live: {row.live} writes this session right now\n\n{text}"
        if session_id == self._previewed:
            self.query_one("#preview", Static).update(Text(text))
            self.query_one("#preview-pane", VerticalScroll).scroll_home(animate=False)

    # ---------------------------------------------------------------- actions

    def action_resume(self) -> None:
        row = self.selected()
        if row is not None:
            self.exit(Choice("resume", row.session.sessionId))

    def action_show(self) -> None:
        row = self.selected()
        if row is not None:
            self.exit(Choice("show", row.session.sessionId))

    def action_rename(self) -> None:
        row = self.selected()
        if row is None:
            return

        def renamed(title: str | None) -> None:
            if title is None or title == row.title:
                return
            if not title.strip():
                self.notify("the title is empty: not renamed", severity="error")
                return
            try:
                self.actions.rename(row.session, title)
            except Exception as exc:  # the command's one-line refusal, shown, not a crash
                self.notify(f"not renamed: {exc}", severity="error")
                return
            self._replace(row, title)
            self.notify("renamed")

        self.push_screen(RenameScreen(row.title), renamed)

    def _replace(self, row: Row, title: str) -> None:
        from dataclasses import replace

        index = self.rows.index(row)
        self.rows[index] = replace(row, title=title)
        self._matcher = self._index()
        cursor = self.query_one(SessionTable).cursor_row
        self._previewed = None
        self.refilter()
        self.action_move(cursor)

    def action_trash(self) -> None:
        row = self.selected()
        if row is None:
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            try:
                refused = self.actions.trash(row.session)
            except Exception as exc:
                refused = str(exc)
            if refused is not None:
                self.notify(f"not trashed: {refused}", severity="error")
                return
            cursor = self.query_one(SessionTable).cursor_row
            self.rows.remove(row)
            self._matcher = self._index()
            self._previewed = None
            self.refilter()
            self.action_move(cursor)
            self.notify(f"moved {row.short_id} to the trash (sessiond restore {row.short_id} puts it back)")

        self.push_screen(ConfirmScreen(f"Move “{row.title}” ({row.short_id}) to the trash?"), answered)
