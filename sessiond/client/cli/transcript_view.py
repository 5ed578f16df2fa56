"""A resumed conversation as text a person reads in a terminal (``show``,
the picker's preview): a header (session, title, file, spend), the turns of
the view model (``render.conversation``) drawn by ``render.terminal``, then
what the resume did (bridges, cuts, repairs) and what was not shown.

Bookkeeping (attachments, system entries, progress, file-history snapshots:
``render.conversation.bookkeeping_entries``) is counted in the last line, or
shown as dim one-liners with ``all_entries``; the walk over the messages is
the view model's, not this module's.
"""

from __future__ import annotations

from typing import Any

from .output import count, printable, printable_name, terminal_columns


def render(result: Any, *, all_entries: bool = False, color: bool = False,
           history: list[dict] | None = None, spend: str | None = None, width: int | None = None,
           full: bool = False) -> str:
    """The whole conversation of a ``Resumed`` result. Bookkeeping is only
    counted (last line) unless ``all_entries``; ``color`` adds ANSI styles
    (the caller decides: a terminal, and no ``NO_COLOR``); ``width``: the
    cells to wrap to (default the terminal's, ``COLUMNS``, else 80);
    ``full``: tool results whole, not shortened;
    ``history`` (``show --history``): the entries before the last compaction,
    shown first under a banner that says a resume does not restore them;
    ``spend`` (``show``): the session's tokens and cost, a header line."""
    import click

    from sessiond.client.render.conversation import bookkeeping_entries, conversation_view, hidden_summary
    from sessiond.client.render.terminal import Style, render_turns

    def paint(text: str, **style: Any) -> str:  # every line is shown printable, then styled
        text = printable(text)
        return click.style(text, **style) if color and style else text

    view = conversation_view(result, history=history or (), all_entries=all_entries,
                             entries=bookkeeping_entries(result.path))
    look = Style(width=width or terminal_columns(), color=color, full=full)
    lines: list[str] = []
    title = " ".join(view.title.split())  # one line, as everywhere a title is shown: a break in it would forge the next
    lines.append(paint(f"session {result.sessionId or '?'} — {title}", bold=True))
    lines.append(paint(f"file    {printable_name(str(result.path))}"))
    if spend is not None:
        lines.append(paint(spend))
    lines.append("")
    if history:
        lines.append(paint(f"══ before compaction: {count(len(history), 'entry', 'entries')}, "
                           "not what a resume restores ".ljust(60, "═"), fg="yellow", bold=True))
        lines.append(render_turns(view.history, look))
        lines.append(paint("══ after compaction: what a resume restores ".ljust(60, "═"), fg="yellow", bold=True))
    lines.append(render_turns(view.turns, look))
    lines.append("")
    state = {"none": "turn complete", "interrupted_turn": "interrupted mid-turn", "interrupted_prompt": "last prompt got no answer"}
    lines.append(paint(f"{count(len(result.chain), 'message')}; {state.get(result.interruption, result.interruption)}"))
    claude = [b for b in result.bridges if b.repair is None]
    wide = [b for b in result.bridges if b.repair is not None]
    if claude:
        lines.append(paint(f"{count(len(claude), 'gap')} bridged where a parent message was missing "
                           "(to a message at most 5 s older, as Claude Code does)"))
    if wide:
        lines.append(paint(f"repair: {count(len(wide), 'gap')} bridged beyond Claude Code's 5 s (--bridge); "
                           "Claude Code's resume starts after them", fg="yellow"))
    if result.cuts:
        lines.append(paint(f"{count(len(result.cuts), 'missing parent')}: the conversation starts after it, as in "
                           "Claude Code; the earlier part is still in the file (`show --bridge` joins it, a repair)",
                           fg="yellow"))
    if result.repairs:
        kinds = sorted({r.kind for r in result.repairs})
        lines.append(paint(f"{len(result.repairs)} repair(s) so the model API accepts it: {', '.join(kinds)}"))
    if result.skippedLines:
        lines.append(paint(f"{result.skippedLines} unreadable line(s) skipped"))
    if result.consistencyDelta:
        lines.append(paint(f"chain length differs from the last turn checkpoint by {result.consistencyDelta}"))
    if result.subagents:
        lines.append(paint(f"subagents: {', '.join(result.subagents)}"))
    first = result.messages[0] if result.messages else {}
    if history is None and first.get("type") == "system" and first.get("subtype") == "compact_boundary":
        lines.append(paint("earlier turns were compacted: `show --history` shows them too", dim=True))
    if view.hidden:
        lines.append(paint(f"{hidden_summary(view.hidden)} (--all-entries shows them)", dim=True))
    return "\n".join(lines)


def reading_options(f):
    """How ``show``, ``tail`` and ``watch`` draw for a person: ``--width``,
    ``--color``, ``--full`` (``--json`` ignores them)."""
    import click

    f = click.option("--full", is_flag=True, help="Tool results whole (default: the first 12 lines, the rest counted).")(f)
    f = click.option("--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto",
                     show_default=True,
                     help="Colour: auto is on a terminal unless NO_COLOR is set or TERM=dumb.")(f)
    return click.option("--width", type=click.IntRange(min=20, max=1000), default=None,
                        help="Wrap to this many columns (default: the terminal's, COLUMNS, else 80).")(f)


def colour(choice: str) -> bool:
    """``--color``: always, never, or (auto) what ``output.colour_on`` says."""
    from .output import colour_on

    return choice == "always" or (choice == "auto" and colour_on())
