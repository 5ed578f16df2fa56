"""The picker's Textual application: a filter line, the sessions' list, the
selected session's conversation, and the keys that act on it.

What it shows and does to the store comes from outside (``Actions``, built by
the ``pick`` command from the functions ``list``, ``search``, ``show``,
``export``, ``rename``, ``tag``, ``fork`` and ``rm`` use); the app decides
only what a person sees and which key does what. Transcript text is data:
every cell and the preview are ``rich.text.Text`` (never parsed as markup) of
text already made printable.

Why a list of its own (``SessionList``) and not a ``DataTable``: a table holds
a widget row per session and costs per row to fill, so a keystroke that keeps
most of 10,000 sessions refilled thousands of rows; this list holds only the
filtered indexes and renders the rows on screen, so a keystroke costs the
filter and one screen whatever it kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Region, Size
from textual.screen import ModalScreen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer
from textual.widgets import Footer, Input, Label, Static

from ..cli.output import printable
from .matching import Matcher
from .rows import Row, grouped

__all__ = ["LIVE_MARK", "Actions", "Choice", "Listing", "PickerApp", "Row", "SessionList"]

PREVIEW_LINES = 400
"""The preview shows the conversation's last this many lines (``s`` shows all)."""

LIVE_MARK = "● "
"""Before the title of a session written right now (``Row.live`` says by whom)."""

FORK_MARK = "⑂ "
"""Before the title of a fork (indented under its origin when that is listed)."""

SEARCH_DELAY = 0.25
"""Seconds the filter must rest before its words are searched in the
conversations (a search per keystroke would queue behind itself)."""

PREVIEW_DELAY = 0.08
"""Seconds the cursor must rest on a session before its file is read for the
preview; after a keystroke in the filter, ``SEARCH_DELAY`` (a preview read
between two keystrokes would slow the second)."""

SEARCH_MIN = 3
"""Characters of a query's words before they are searched in the conversations."""


class Actions(Protocol):
    """What the picker does to the store, through the commands' own functions."""

    def preview(self, session: Any) -> str:
        """The session's conversation as plain printable text (``show``'s)."""

    def spend(self, session: Any) -> str:
        """The session's tokens and cost in one printable line (``show``'s header line)."""

    def search(self, text: str) -> list[tuple[str, str]]:
        """(session id, printable snippet) of the sessions whose conversation
        holds ``text``, best first (``search``'s ranking); raise to refuse."""

    def rename(self, session: Any, title: str) -> None:
        """Give the session ``title`` (``rename``'s); raise to refuse."""

    def tag(self, session: Any, tag: str) -> None:
        """Tag the session ``tag``, untag it when empty (``tag``'s); raise to refuse."""

    def fork(self, session: Any) -> Row:
        """Fork the session (``fork``'s): the new session's row; raise to refuse."""

    def export(self, session: Any, fmt: str) -> str:
        """Write the session as ``fmt`` (html, markdown) where ``export`` would: what was written, in a line."""

    def trash(self, session: Any) -> str | None:
        """Move the session to the trash (``rm``'s): None, or why it was not."""


@dataclass(frozen=True)
class Listing:
    """Rows (newest activity first) and how to show them: what the picker
    opens on, and what replaces it when the whole listing arrives."""

    rows: list[Row]
    show_project: bool
    scope: str


@dataclass(frozen=True)
class Choice:
    """What the person chose on leaving: ``resume`` or ``show`` a session id."""

    action: str
    session_id: str


def one_line(exc: BaseException) -> str:
    """An error as one line for the status line (never a traceback)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


class AskScreen(ModalScreen[str | None]):
    """One line of text asked for (a title, a tag): Enter gives it, Escape gives None."""

    DEFAULT_CSS = """
    AskScreen { align: center middle; }
    AskScreen > Vertical { width: 80%; height: auto; border: round $accent; padding: 0 1; background: $surface; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, question: str, current: str) -> None:
        super().__init__()
        self.question = question
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question, markup=False)
            yield Input(value=self.current, id="answer")

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


STRIPS_KEPT = 2000
"""Rendered lines the list keeps (a line is rendered again only when its row
changed, or after this many others): typing moves rows up and down the screen,
their rendering stays the same."""

LIST_KEYS = ("s", "r", "t", "f", "e", "E", "d", "q", "slash", "space")
"""The keys the list takes for itself; any other printable key goes to the filter."""


class SessionList(ScrollView, can_focus=True):
    """The filtered sessions, one line each, only the lines on screen rendered;
    a cursor on one. Its keys act on that one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "app.resume", "resume"),
        Binding("s", "app.show", "show"),
        Binding("r", "app.rename", "rename"),
        Binding("t", "app.tag", "tag"),
        Binding("f", "app.fork", "fork"),
        Binding("e", "app.export('html')", "export"),
        Binding("E", "app.export('markdown')", "export md", show=False),
        Binding("d", "app.trash", "trash"),
        Binding("q", "app.quit", "quit"),
        Binding("slash", "app.focus_filter", "filter", show=False),
    ]
    DEFAULT_CSS = "SessionList { height: 1fr; }"

    def __init__(self, line: Callable[[int, int], Text], key: Callable[[int], int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._line = line
        self._key = key
        self._strips: dict[tuple[int, int, int | bool], Strip] = {}
        self._base = Style()
        self.count = 0
        self.cursor = 0

    def set_count(self, count: int) -> None:
        """Show ``count`` lines (the filter's result), the cursor kept in range."""
        self.count = count
        self.cursor = max(0, min(self.cursor, count - 1))
        self.virtual_size = Size(self.size.width, count)
        self.refresh()

    def move_to(self, index: int) -> None:
        """Put the cursor on line ``index`` (clamped), scrolled into view."""
        if not self.count:
            return
        self.cursor = max(0, min(self.count - 1, index))
        top, height = round(self.scroll_offset.y), max(1, self.scrollable_content_region.height)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        self._base = self.rich_style  # once per screen, not per line (it walks the ancestors' styles)
        return super().render_lines(crop)

    def forget(self) -> None:
        """Drop the rendered lines (the rows, their order, or what they show changed)."""
        self._strips.clear()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index = round(self.scroll_offset.y) + y
        base = self._base
        if index >= self.count:
            return Strip.blank(width, base)
        key = (self._key(index), width, index == self.cursor and (1 + self.has_focus))
        strip = self._strips.get(key)
        if strip is None:
            text = self._line(index, width)
            if index == self.cursor:
                text.stylize("reverse" if self.has_focus else "bold reverse dim")
            segments = Segment.apply_style(text.render(self.app.console), base)
            strip = Strip(list(segments)).adjust_cell_length(width, base)
            if len(self._strips) > STRIPS_KEPT:
                self._strips.clear()
            self._strips[key] = strip
        return strip

    def on_click(self, event: events.Click) -> None:
        index = round(self.scroll_offset.y) + event.y
        if 0 <= index < self.count and isinstance(self.app, PickerApp):
            self.app.highlight(index)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def on_key(self, event: events.Key) -> None:
        if event.is_printable and event.character and event.key not in LIST_KEYS:
            event.stop()
            self.app.query_one("#filter", Input).insert_text_at_cursor(event.character)
            self.app.query_one("#filter", Input).focus()


class PickerApp(App[Choice | None]):
    """The picker: the rows (newest activity first, forks under their origin)
    filtered as one types, by title, id, tag, project and, once the typing
    rests, the conversations' text; the highlighted session's conversation in
    the preview. ``more`` (run in a thread once the first screen is up) gives
    the whole listing when ``rows`` is only its first page. Exits with a
    ``Choice`` (Enter: resume, ``s``: show) or None (``q``, Escape)."""

    TITLE = "sessiond"
    CSS = """
    #filter { dock: top; }
    #main { height: 1fr; }
    #message { height: 1; width: 100%; }
    #status { height: 1; width: 100%; color: $text-muted; }
    #list-pane { width: 3fr; }
    #header { height: 1; text-style: bold; }
    #preview-pane { width: 2fr; border-left: solid $primary; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "quit", "quit", priority=True),
        Binding("down", "move(1)", show=False), Binding("up", "move(-1)", show=False),
        Binding("pagedown", "move(10)", show=False), Binding("pageup", "move(-10)", show=False),
        Binding("tab", "focus_list", "keys (s r t f e d q)", show=True),
    ]

    def __init__(self, rows: list[Row], actions: Actions, *, show_project: bool, scope: str,
                 more: Callable[[], Listing] | None = None) -> None:
        super().__init__()
        self.actions = actions
        self.show_project = show_project
        self.scope = scope
        self.listing: list[Row] = list(rows)
        """The rows in listing order (newest activity first)."""
        self.rows: list[Row] = grouped(self.listing)
        """The rows as shown unfiltered: forks under their origin."""
        self.shown: list[int] = []
        """Indexes into ``rows`` of what the filter keeps, in the order shown."""
        self.found: dict[str, str] = {}
        """The last full-text search's snippet of each session it found (for the current filter)."""
        self._more = more
        self._loading = more is not None
        self._matcher = self._index()
        self._by_id = {r.session.sessionId: i for i, r in enumerate(self.rows)}
        self._previewed: str | None = None
        self._search_timer: Timer | None = None
        self._searching = ""
        self._title_width = 40
        self._cols: list[tuple[str, int]] = []
        self._preview_timer: Timer | None = None

    def _index(self) -> Matcher:
        return Matcher([r.title for r in self.rows], [r.session.sessionId for r in self.rows],
                       [r.tag for r in self.rows], [r.project for r in self.rows])

    def _reindex(self) -> None:
        """After the rows changed: the filter's index and the id lookup rebuilt."""
        self.rows = grouped(self.listing)
        self._matcher = self._index()
        self._by_id = {r.session.sessionId: i for i, r in enumerate(self.rows)}
        self.query_one(SessionList).forget()

    def compose(self) -> ComposeResult:
        yield Input(placeholder="type to filter: title words (typos forgiven), an id prefix, #tag, @project; "
                                "words in the conversations are searched once you pause", id="filter")
        with Horizontal(id="main"):
            with Vertical(id="list-pane"):
                yield Static(id="header", markup=False)
                yield SessionList(self._line, lambda index: self.shown[index], id="sessions")
            with VerticalScroll(id="preview-pane"):
                yield Static(id="preview", markup=False)
        yield Static(id="message", markup=False)
        yield Static(id="status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self._layout()
        self.refilter()
        self.query_one("#filter", Input).focus()
        if self._more is not None:  # once the first screen is painted: the read competes with it for the CPU
            more = self._more
            self.call_after_refresh(lambda: self._load_more(more))

    def on_resize(self, event: events.Resize) -> None:
        self._layout()

    # ---------------------------------------------------------------- columns

    def _columns(self) -> list[tuple[str, int]]:
        """(heading, width) of every column but the title, in order (set by ``_layout``)."""
        return self._cols

    def _column_set(self) -> list[tuple[str, int]]:
        cols = [("ID", 8)]
        if any(r.tag for r in self.rows):
            cols.append(("TAG", 12))
        if self.show_project:
            cols.append(("PROJECT", 24))
        cols += [("LAST ACTIVITY", 16), ("MSGS", 5)]
        return cols

    def _layout(self) -> None:
        """The title's width from the list's, and the header line."""
        width = self.query_one(SessionList).scrollable_content_region.width or self.size.width * 3 // 5
        cols = self._cols = self._column_set()
        self._title_width = max(16, width - sum(w + 2 for _, w in cols))
        header = Text("TITLE")
        header.truncate(self._title_width, pad=True)
        for name, w in cols:
            header.append("  " + (name.rjust(w) if name == "MSGS" else name.ljust(w))[:w])
        self.query_one("#header", Static).update(header, layout=False)
        self.query_one(SessionList).forget()

    def _line(self, index: int, width: int) -> Text:
        """The list's line ``index`` (of the filtered ones)."""
        row = self.rows[self.shown[index]]
        cells = self.cells(row)
        parts = [self._title_text(row)]
        for (name, w), value in zip(self._columns(), cells[1:], strict=True):
            cell = Text(value, style="cyan" if name == "TAG" and value else "", no_wrap=True)
            cell.truncate(w, overflow="ellipsis", pad=True)
            if name == "MSGS":
                cell = Text(value.rjust(w)[-w:])
            parts += [Text("  "), cell]
        return Text.assemble(*parts, no_wrap=True, end="")

    def _title_text(self, row: Row) -> Text:
        """The title cell: the fork's indent and mark, the live mark, the title,
        and a found session's snippet, dim, after it."""
        parts: list[Text | tuple[str, str] | str] = []
        if row.depth or row.forked_from:
            parts.append(("  " * row.depth + FORK_MARK, "dim"))
        if row.live:
            parts.append((LIVE_MARK, "bold green"))
        parts.append(row.title)
        snippet = self.found.get(row.session.sessionId)
        if snippet is not None:
            parts.append(("  ⌕ " + snippet, "dim italic"))
        text = Text.assemble(*parts, no_wrap=True)
        text.truncate(self._title_width, overflow="ellipsis", pad=True)
        return text

    def cells(self, row: Row) -> list[str]:
        """The plain text of ``row``'s cells, in column order (title first)."""
        names = [name for name, _ in self._columns()]
        values = {"ID": row.short_id, "TAG": f"#{row.tag}" if row.tag else "", "PROJECT": row.project,
                  "LAST ACTIVITY": row.last, "MSGS": row.messages}
        return [row.title] + [values[n] for n in names]

    def column(self, heading: str) -> list[str]:
        """The plain text of one column (``TITLE`` with its marks) over every row the filter keeps."""
        if heading == "TITLE":
            return [self._title_text(self.rows[i]).plain.rstrip() for i in self.shown]
        at = 1 + [name for name, _ in self._columns()].index(heading)
        return [self.cells(self.rows[i])[at] for i in self.shown]

    def _alive(self) -> bool:
        """Whether the picker's screen is still up: a timer or a worker's answer
        that comes as the app exits finds nothing to update, and must not raise."""
        return bool(self.query("#filter"))

    # ---------------------------------------------------------------- listing

    def refilter(self, keep: str | None = None) -> None:
        """Show the rows the filter keeps (title and id matches, then the
        sessions the last search found in their conversations), the cursor on
        the first, or on ``keep`` (a session id) when it is still shown."""
        query = self.query_one("#filter", Input).value
        shown = self._matcher.filter(query)
        if self.found:
            kept = set(shown)
            shown += [i for sid in self.found if (i := self._by_id.get(sid)) is not None
                      and i not in kept and self._matcher.in_scope(i, query)]
        self.shown = shown
        listing = self.query_one(SessionList)
        listing.set_count(len(shown))
        at = 0
        if keep is not None:
            at = next((n for n, i in enumerate(shown) if self.rows[i].session.sessionId == keep), 0)
        listing.move_to(at)
        self._status()
        if self.shown:
            self.preview_selected(SEARCH_DELAY)
        else:
            self._previewed = None
            self.query_one("#preview", Static).update(Text("no session matches" if self.rows else
                                                           "reading sessions…" if self._loading else "no sessions"))

    def _status(self) -> None:
        query = self.query_one("#filter", Input).value.strip()
        total = f"{len(self.rows)}{'+' if self._loading else ''}"
        what = f"{len(self.shown)} of {total} sessions" if query else f"{total} sessions"
        found = sum(1 for sid in self.found if sid in self._by_id)
        if found:
            what += f" ({found} found in conversations)"
        if self._searching:
            what += " · searching…"
        if self._loading:
            what += " · reading the rest…"
        self.query_one("#status", Static).update(Text(f"{what} · {self.scope}"), layout=False)  # its size is fixed

    def say(self, text: str, *, error: bool = False) -> None:
        """One line in the message line: an action's result, or why it was not
        done, shown printable (it may quote what was typed, or an error's text)."""
        self.query_one("#message", Static).update(Text(printable(text), style="bold red" if error else "green"),
                                                  layout=False)

    def selected(self) -> Row | None:
        """The highlighted row, if any."""
        listing = self.query_one(SessionList)
        if not self.shown or not 0 <= listing.cursor < len(self.shown):
            return None
        return self.rows[self.shown[listing.cursor]]

    def highlight(self, index: int) -> None:
        """Put the cursor on the filtered line ``index`` and preview it."""
        self.query_one(SessionList).move_to(index)
        self.preview_selected()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "filter":
            return
        if self.found:
            self.found = {}  # an answer to another query
            self.query_one(SessionList).forget()
        self.refilter()
        self._schedule_search(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.action_resume()

    def action_move(self, by: int) -> None:
        listing = self.query_one(SessionList)
        self.highlight(listing.cursor + by)

    def action_focus_list(self) -> None:
        self.query_one(SessionList).focus()

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    @work(thread=True, group="listing")
    def _load_more(self, more: Callable[[], Listing]) -> None:
        """The whole listing, read in a thread while the first page is on screen."""
        try:
            got: Listing | BaseException = more()
        except Exception as exc:  # said in the message line; the first page stays
            got = exc
        self.call_from_thread(self._replace_listing, got)

    def _replace_listing(self, got: Listing | BaseException) -> None:
        if not self._alive():
            return
        self._loading = False
        if isinstance(got, BaseException):
            self.say(f"could not read every session: {one_line(got)}", error=True)
            self._status()
            return
        row = self.selected()
        self.listing = list(got.rows)
        self.show_project, self.scope = got.show_project, got.scope
        self._reindex()
        self._layout()
        self.refilter(keep=row.session.sessionId if row is not None else None)

    # ---------------------------------------------------------------- search

    def _schedule_search(self, query: str) -> None:
        """The conversations searched for ``query``'s words once typing rests."""
        if self._search_timer is not None:
            self._search_timer.stop()
            self._search_timer = None
        text = search_text(query)
        self._searching = ""
        if text:
            self._search_timer = self.set_timer(SEARCH_DELAY, lambda: self._start_search(query, text))
        self._status()

    def _start_search(self, query: str, text: str) -> None:
        if not self._alive():
            return
        self._search_timer = None
        if query != self.query_one("#filter", Input).value:
            return
        self._searching = query
        self._status()
        self._search(query, text)

    @work(thread=True, exclusive=True, group="search")
    def _search(self, query: str, text: str) -> None:
        """The daemon's ranked search (or the CLI's fallback), off the UI thread."""
        try:
            got: list[tuple[str, str]] | BaseException = self.actions.search(text)
        except Exception as exc:  # a query the search refuses: said, the title filter goes on
            got = exc
        self.call_from_thread(self._found, query, got)

    def _found(self, query: str, got: list[tuple[str, str]] | BaseException) -> None:
        if not self._alive():
            return
        if query != self.query_one("#filter", Input).value:
            return  # a stale answer: the filter changed since it was asked
        self._searching = ""
        if isinstance(got, BaseException):
            self.say(f"search: {one_line(got)}", error=True)
            self._status()
            return
        row = self.selected()
        self.found = dict(got)
        self.query_one(SessionList).forget()
        self.refilter(keep=row.session.sessionId if row is not None else None)

    # ---------------------------------------------------------------- preview

    def preview_selected(self, delay: float = PREVIEW_DELAY) -> None:
        """The highlighted session's conversation in the preview, read once the
        cursor rests (``delay``: typing or scrolling through does not
        read every file it passes)."""
        row = self.selected()
        if row is None or row.session.sessionId == self._previewed:
            return
        self._previewed = row.session.sessionId  # the pane keeps the last one until this one is read
        if self._preview_timer is not None:
            self._preview_timer.stop()
        self._preview_timer = self.set_timer(delay, lambda: self._preview_rested(row))

    def _preview_rested(self, row: Row) -> None:
        if not self._alive():
            return
        self._preview_timer = None
        if row.session.sessionId == self._previewed:
            self._load_preview(row)

    @work(thread=True, exclusive=True, group="preview")
    def _load_preview(self, row: Row) -> None:
        """The conversation's last lines under the session's tokens and cost,
        both read here, in the preview's thread, for this session alone."""
        try:
            text = self.actions.preview(row.session)
        except Exception as exc:  # a file gone or unreadable: said in the pane, the picker goes on
            text = f"cannot show this session: {one_line(exc)}"
        lines = text.splitlines()
        if len(lines) > PREVIEW_LINES:
            text = "\n".join([f"… {len(lines) - PREVIEW_LINES} earlier lines (s shows them all)", *lines[-PREVIEW_LINES:]])
        try:
            spent = self.actions.spend(row.session)
        except Exception as exc:  # as above: said, not a crash
            spent = f"tokens not counted: {one_line(exc)}"
        text = f"{spent}\n{text}"
        self.call_from_thread(self._show_preview, row.session.sessionId, text)

    def _show_preview(self, session_id: str, text: str) -> None:
        if not self._alive():
            return
        row = self.selected()
        if row is not None and row.session.sessionId == session_id:
            if session_id in self.found:
                text = f"found: {self.found[session_id]}\n\n{text}"
            if row.live:
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

    def _replace_row(self, row: Row, new: Row) -> None:
        """``row`` is ``new`` now (a title or tag changed): re-indexed, the cursor kept on it."""
        self.listing[self.listing.index(row)] = new
        self._reindex()
        self._layout()
        self._previewed = None
        self.refilter(keep=new.session.sessionId)

    def action_rename(self) -> None:
        row = self.selected()
        if row is None:
            return

        def renamed(title: str | None) -> None:
            if title is None or title == row.title:
                return
            if not title.strip():
                self.say("not renamed: the title is empty", error=True)
                return
            try:
                self.actions.rename(row.session, title)
            except Exception as exc:  # the command's one-line refusal, shown, not a crash
                self.say(f"not renamed: {one_line(exc)}", error=True)
                return
            self._replace_row(row, replace(row, title=printable(" ".join(title.split()))))
            self.say(f"renamed {row.short_id}: {' '.join(title.split())}")

        self.push_screen(AskScreen("New title (Enter renames, Escape cancels):", row.title), renamed)

    def action_tag(self) -> None:
        row = self.selected()
        if row is None:
            return

        def tagged(tag: str | None) -> None:
            if tag is None:
                return
            tag = tag.strip().removeprefix("#")
            if tag == row.tag:
                return
            try:
                self.actions.tag(row.session, tag)
            except Exception as exc:
                self.say(f"not tagged: {one_line(exc)}", error=True)
                return
            self._replace_row(row, replace(row, tag=printable(" ".join(tag.split()))))
            self.say(f"tagged {row.short_id} #{tag}" if tag else f"untagged {row.short_id} (was #{row.tag})")

        self.push_screen(AskScreen("Tag (Enter tags, empty removes the tag, Escape cancels; #tag filters):", row.tag),
                         tagged)

    def action_fork(self) -> None:
        row = self.selected()
        if row is None:
            return

        def forked(new: Row) -> None:
            self.listing.insert(self.listing.index(row) + 1 if row in self.listing else 0, new)
            self._reindex()
            self.refilter(keep=new.session.sessionId)
            self.say(f"forked {row.short_id} into {new.short_id} (Enter resumes the fork)")

        self.say(f"forking {row.short_id}…")
        self._act("not forked", lambda: self.actions.fork(row.session), forked)

    def action_export(self, fmt: str) -> None:
        row = self.selected()
        if row is None:
            return
        self.say(f"exporting {row.short_id}…")
        self._act("not exported", lambda: self.actions.export(row.session, fmt), self.say)

    @work(thread=True, group="action")
    def _act(self, failed: str, act: Callable[[], Any], done: Callable[[Any], None]) -> None:
        """``act()`` in a thread (a fork or an export of a long session takes a
        while: the picker goes on answering keys), then ``done(its result)``,
        or ``failed: why`` in the message line."""
        try:
            result = act()
        except Exception as exc:  # the command's refusal, in one line
            self.call_from_thread(self.say, f"{failed}: {one_line(exc)}", error=True)
            return
        self.call_from_thread(done, result)

    def action_trash(self) -> None:
        row = self.selected()
        if row is None:
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                self.say(f"kept {row.short_id}")
                return
            try:
                refused = self.actions.trash(row.session)
            except Exception as exc:
                refused = one_line(exc)
            if refused is not None:
                self.say(f"not trashed: {refused}", error=True)
                return
            cursor = self.query_one(SessionList).cursor
            self.listing.remove(row)
            self._reindex()
            self._previewed = None
            self.refilter()
            self.highlight(cursor)
            self.say(f"moved {row.short_id} to the trash (sessiond restore {row.short_id} puts it back)")

        self.push_screen(ConfirmScreen(f"Move “{row.title}” ({row.short_id}) to the trash?"), answered)


def search_text(query: str) -> str:
    """What the conversations are searched for as ``query`` is typed: its plain
    words (not ``#tag`` or ``@project``), the last one as a prefix (it may be
    half typed); empty when too short to be worth a search."""
    plain = [w for w in query.split() if not w.startswith(("#", "@"))]
    if not plain or sum(len(w) for w in plain) < SEARCH_MIN:
        return ""
    last = plain[-1]
    if last.isalnum() and len(last) >= SEARCH_MIN:
        plain[-1] = last + "*"
    return " ".join(plain)
