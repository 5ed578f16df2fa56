"""The view model of a conversation (``render.conversation``) drawn for a
terminal with rich: what ``show``, ``tail`` and ``watch`` print for a person.

Each turn under a header (its role and time); a person's words as they were
typed, the model's Markdown rendered (headings, emphasis, lists, code coloured
by Pygments, tables); each tool call as one line, its name and the gist of its
input, its result under it with its newlines kept (a long one shortened, the
lines left out counted; ``full`` shows all); harness markup, thinking and
shown bookkeeping as dim one-line notices. Wrapped to ``width`` cells.

Why rich: it wraps by cells (CJK, emoji), renders Markdown from the same
parser the HTML export uses (markdown-it) and colours code, with no
terminal of its own: it draws into a string here, which the CLI prints
through its output layer (``cli/output.py``).

A transcript cannot drive the terminal through this. Every field is passed
through ``printable`` before rich sees it (an ESC shows as ``^[``); rich
markup, emoji codes and highlighting are off; Markdown is parsed with raw HTML
off (an HTML tag shows as text, not dropped) and links drawn as text with their
address, never as OSC 8 hyperlinks; and what rich returns keeps no escape
sequence but SGR colours and no control (``safe``), whatever a later rich
might emit or the Markdown parser decode.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec

from .conversation import (
    Image,
    Notice,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Turn,
    one_line,
)

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text as RichText

RESULT_LINES = 12
"""A tool result's lines shown without ``full``; the rest are counted."""

INDENT = 4
"""Cells a tool result is indented under its call."""

_SGR = re.compile(r"(\x1b\[[0-9;]*m)")
_TRAILING = re.compile(r"[ ]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


class Style(msgspec.Struct, frozen=True):
    """How to draw: ``width`` in cells, ``color`` (ANSI styles, the caller
    decides: a terminal and no ``NO_COLOR``, or ``--color``), ``full`` (tool
    results whole, not shortened), ``agent`` (a subagent's id: its headers
    start ``[agent]``, as ``watch --agents`` marks them)."""

    width: int = 80
    color: bool = False
    full: bool = False
    agent: str | None = None


def _printable(text: str) -> str:
    from sessiond.client.cli.output import printable

    return printable(text)


def safe(rendered: str) -> str:
    """``rendered`` with every escape sequence but SGR (colours, bold) shown
    as text, and every other control too (``printable``): the last word on
    what reaches the terminal. Its fields went through ``printable`` before
    they were drawn, yet the Markdown parser decodes a character reference
    after that: a reply's ``&#x202e;`` is a bidi override only once parsed."""
    pieces = _SGR.split(rendered)  # text, SGR, text, ...: the SGR pieces at odd places
    return "".join(piece if i % 2 else _printable(piece) for i, piece in enumerate(pieces))


def _console(style: Style, file: io.StringIO) -> Console:
    from rich.console import Console

    return Console(file=file, width=max(20, style.width), force_terminal=style.color, no_color=not style.color,
                   color_system="auto" if style.color else None, highlight=False, markup=False, emoji=False,
                   legacy_windows=False, force_jupyter=False, force_interactive=False, soft_wrap=False,
                   tab_size=4)


@functools.cache
def _reply_markdown() -> type:
    """rich's Markdown with every heading flush left (a reply's heading is a
    section's, not a title page's: rich centres a level-one heading)."""
    from rich.markdown import Heading, Markdown

    class LeftHeading(Heading):
        def __rich_console__(self, console, options):
            text = self.text.copy()
            text.justify = "left"
            yield text

    class Reply(Markdown):
        elements = {**Markdown.elements, "heading_open": LeftHeading}

    return Reply


def _markdown(text: str) -> RenderableType:
    """``text`` (already printable) as rich Markdown: raw HTML off (a tag
    stays text, never dropped), links as text with their address (no OSC 8),
    code in the terminal's own colours, headings flush left."""
    md = _reply_markdown()("", hyperlinks=False, code_theme="ansi_dark")
    md.markup = text
    md.parsed = _parser().parse(text)
    return md


@functools.cache
def _parser():
    """CommonMark with raw HTML off, and the tables and strikethrough rich draws."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")


def _text(text: str, style: str = "", **kw) -> RenderableType:
    from rich.text import Text as RichText

    return RichText(_printable(text), style=style, **kw)


def _line(parts: Iterable[tuple[str, str]], width: int | None = None, overflow: str = "ellipsis") -> RichText:
    """(text, style) parts as one rich Text; cut to ``width`` cells with an
    ellipsis when given (a one-liner: its line breaks as spaces, or a
    writer's string, a media type or an id, would draw lines of its own),
    else wrapped where it is drawn."""
    from rich.text import Text as RichText

    line = RichText(overflow="fold")
    for text, st in parts:
        line.append(_printable(text if width is None else text.replace("\n", " ")), style=st)
    if width is not None:
        line.truncate(max(1, width), overflow=overflow)  # type: ignore[arg-type]
    return line


class _Hanging:
    """``mark`` then ``body``, the body's every line starting ``indent``
    cells in (the mark after ``lead`` blank cells): a tool result's lines
    under its ``⎿``, a call's gist wrapped under its name. What a two-column
    grid draws, for a fraction of its cost (a conversation has thousands)."""

    def __init__(self, mark: RichText, body: RenderableType, indent: int, lead: int = 0) -> None:
        self.mark, self.body, self.indent, self.lead = mark, body, indent, lead

    def __rich_console__(self, console, options):
        from rich.segment import Segment

        inner = options.update(width=max(1, options.max_width - self.indent), height=None)
        first = [Segment(" " * self.lead), *self.mark.render(console),
                 Segment(" " * max(0, self.indent - self.lead - self.mark.cell_len))]
        rest = [Segment(" " * self.indent)]
        new_line = Segment.line()
        for i, line in enumerate(console.render_lines(self.body, inner, pad=False)):
            yield from first if i == 0 else rest
            yield from line
            yield new_line


def _hanging(mark: RichText, body: RenderableType, indent: int, lead: int = 0) -> RenderableType:
    """See :class:`_Hanging`."""
    return _Hanging(mark, body, indent, lead)


def header(turn: Turn, style: Style, when: str) -> RenderableType:
    """``── assistant 11:02:07 ─────``: the role, the time, a rule to the width."""
    role = {"tool": "tool result"}.get(turn.role, turn.role)
    if turn.meta and turn.role in ("user", "assistant"):
        role += " (harness)" if turn.role == "user" else " (synthetic)"
    colour = "dim" if turn.meta else {"user": "bold cyan", "assistant": "bold green"}.get(turn.role, "bold")
    parts = [(f"[{one_line(style.agent, 12)}] ", "bold magenta")] if style.agent else []
    parts.append((f"── {role} {when}".rstrip() + " " + "─" * style.width, colour))
    return _line(parts, style.width, "crop")


def notice(n: Notice, width: int) -> RenderableType:
    """A dim one-liner: ``· command: /init`` (shown bookkeeping: ``·· system: …``)."""
    mark = "·· " if n.kind == "entry" else "· "
    return _line([(f"{mark}{n.label}: {n.gist}", "dim")], width)


def _shortened(text: str, style: Style) -> tuple[str, int]:
    """``text`` as shown under its call: whole with ``full``, else its first
    ``RESULT_LINES`` lines (none longer than what fills them), and how many
    lines were left out."""
    lines = text.expandtabs(4).splitlines() or [""]
    if style.full:
        return "\n".join(lines), 0
    budget = RESULT_LINES * max(20, style.width - INDENT)
    kept: list[str] = []
    for line in lines[:RESULT_LINES]:
        if budget <= 0:
            break
        kept.append(line[:budget] + ("…" if len(line) > budget else ""))
        budget -= max(len(line), 1)
    return "\n".join(kept), len(lines) - len(kept)


def result_block(result: ToolResult, style: Style) -> list[RenderableType]:
    """A tool result, indented under its call: ``⎿`` then its text with its
    newlines kept (an error's in red), images counted, lines left out
    counted, its system reminders as notices."""
    from rich.padding import Padding

    text, hidden = _shortened(result.text.strip("\n"), style)
    parts = [("error: ", "bold red")] if result.is_error else []
    parts.append((text, "red" if result.is_error else "") if text.strip() else ("(no output)", "dim"))
    out: list[RenderableType] = [_hanging(_line([("⎿", "dim")]), _line(parts), INDENT, lead=2)]
    extra = []
    if result.images:
        extra.append(f"[{result.images} image{'s' if result.images != 1 else ''}]")
    if hidden:
        extra.append(f"… {hidden} more line{'s' if hidden != 1 else ''} (--full shows them)")
    inner = style.width - INDENT
    out.extend(Padding(_line([(line, "dim")], inner), (0, 0, 0, INDENT)) for line in extra)
    out.extend(Padding(notice(n, inner), (0, 0, 0, INDENT)) for n in result.notices)
    return out


def call_line(call: ToolCall, *, answered: bool = False) -> RenderableType:
    """``● Bash ls -la``: the tool's name and the gist of its input (wrapped
    under the name); ``answered``: the header of a result that came after
    its call was shown, ``↳ Bash ls -la``."""
    body = _line([(one_line(call.name), "bold yellow"), (" " + call.gist if call.gist else "", "")])
    return _hanging(_line([("↳" if answered else "●", "dim" if answered else "yellow")]), body, 2)


def blocks(turn: Turn, style: Style) -> list[RenderableType]:
    """The renderables of a turn's blocks, in order."""
    out: list[RenderableType] = []
    for block in turn.blocks:
        if isinstance(block, Text):
            out.append(_markdown(_printable(block.text)) if turn.role == "assistant" else _text(block.text))
        elif isinstance(block, Thinking):
            out.append(_line([(f"✻ thinking: {one_line(block.text)}", "dim italic")], style.width))
        elif isinstance(block, ToolCall):
            out.append(call_line(block, answered=turn.role == "tool"))
            if block.result is not None:
                out.extend(result_block(block.result, style))
        elif isinstance(block, ToolResult):
            out.append(_line([("↳ result of a call not shown", "dim"),
                              (f" ({block.tool_use_id})" if block.tool_use_id else "", "dim")], style.width))
            out.extend(result_block(block, style))
        elif isinstance(block, Image):
            out.append(_line([(f"[image: {block.media_type}]", "dim")], style.width))
        elif isinstance(block, Notice):
            out.append(notice(block, style.width))
    return out


def _headed(turn: Turn) -> bool:
    """Whether a turn gets a header: not the harness's own (a compaction, a
    slash command's record, shown bookkeeping: their notices say it) nor a
    late result (its ``↳`` line names its call)."""
    return turn.role in ("user", "assistant") or (turn.role == "tool" and not isinstance(turn.blocks[0], ToolCall))


def draw(items: Iterable[RenderableType], style: Style) -> str:
    """``items`` drawn at ``style.width``: a string whose only escapes are
    SGR styles (none without ``color``), no trailing spaces."""
    buf = io.StringIO()
    console = _console(style, buf)
    for item in items:
        console.print(item)
    return _TRAILING.sub(r"\1", safe(buf.getvalue())).rstrip("\n")


def render_turns(turns: Iterable[Turn], style: Style, *, when=None, continues: bool = False,
                 gap: bool = False, attached: bool = False) -> str:
    """``turns`` as text for a terminal (see the module). ``when(iso)``: how a
    header shows a time (``output.local_time`` by default); ``continues``: the
    first turn goes on from one printed before (no header); ``gap``: something
    was printed before, so a header starts with a blank line; ``attached``:
    the first turn is a late result (a ``tool`` turn holding its call) and
    that call is the last thing printed, so only the result is drawn."""
    if when is None:
        from sessiond.client.cli.output import local_time as when
    items: list[RenderableType] = []
    for i, turn in enumerate(turns):
        if not turn.blocks:
            continue
        first = turn.blocks[0]
        if i == 0 and attached and isinstance(first, ToolCall) and first.result is not None:
            items.extend(result_block(first.result, style))
            items.extend(blocks(Turn(turn.role, turn.time, turn.uuid, turn.blocks[1:]), style))
            continue
        if _headed(turn) and not (i == 0 and continues):
            if items or gap:
                items.append(_text(""))
            items.append(header(turn, style, when(turn.time) if turn.time else ""))
        items.extend(blocks(turn, style))
    return draw(items, style)
