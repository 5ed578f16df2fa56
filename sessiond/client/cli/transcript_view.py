"""A resumed conversation as text a person can read in a terminal.

Roles as headers, message text as is (long text shortened), tool calls as one
line with their input, tool results as one shortened line, thinking hidden,
attachments and system entries left out and counted at the end (hook output
and reminders outnumber the conversation in real transcripts).
"""

from __future__ import annotations

from typing import Any

from .output import count, local_time, printable

TEXT_MAX = 2000
TOOL_MAX = 160
RESULT_MAX = 200


def shorten(text: str, limit: int) -> str:
    """At most ``limit`` characters of ``text``, its controls shown, not obeyed."""
    text = printable(text.strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str, limit: int) -> str:
    return shorten(" ".join(text.split()), limit)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") if isinstance(b, dict) and b.get("type") == "text"
                 else f"[{b.get('type', '?')}]" if isinstance(b, dict) else str(b) for b in content]
        return " ".join(parts)
    return "" if content is None else str(content)


def render_blocks(content: Any) -> list[str]:
    if isinstance(content, str):
        return [shorten(content, TEXT_MAX)] if content.strip() else []
    out: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text", "").strip():
            out.append(shorten(block["text"], TEXT_MAX))
        elif kind == "tool_use":
            import msgspec

            args = msgspec.json.encode(block.get("input", {})).decode()
            out.append(f"  → {block.get('name', 'tool')}({one_line(args, TOOL_MAX)})")
        elif kind == "tool_result":
            mark = "✗" if block.get("is_error") else "←"
            out.append(f"  {mark} {one_line(_result_text(block.get('content')), RESULT_MAX) or '(empty result)'}")
        elif kind == "image":
            out.append("  [image]")
    return out


def _noise(kind: str, msg: dict) -> str:
    if kind == "system":
        return f"·· system: {one_line(str(msg.get('content') or msg.get('subtype') or 'system'), RESULT_MAX)}"
    return f"·· attachment: {(msg.get('attachment') or {}).get('type', '?')}"


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def render(result: Any, *, all_entries: bool = False, color: bool = False,
           history: list[dict] | None = None, spend: str | None = None) -> str:
    """The whole conversation of a ``Resumed`` result. Attachments and system
    entries are only counted (last line) unless ``all_entries``; ``color`` adds
    ANSI styles (the caller decides: a terminal, and no ``NO_COLOR``);
    ``history`` (``show --history``): the entries before the last compaction,
    shown first under a banner that says a resume does not restore them;
    ``spend`` (``show``): the session's tokens and cost, a header line."""
    import click

    def paint(text: str, **style: Any) -> str:  # every line is shown printable, then styled
        text = printable(text)
        return click.style(text, **style) if color and style else text

    lines: list[str] = []
    from sessiond.store.lite import UNTITLED, session_title

    title = session_title(result.path) or UNTITLED  # the title list, export and search show
    lines.append(paint(f"session {result.sessionId or '?'} — {title}", bold=True))
    lines.append(paint(f"file    {result.path}"))
    if spend is not None:
        lines.append(paint(spend))
    lines.append("")
    last_turn = None
    hidden = {"attachment": 0, "system": 0}
    streams: list[tuple[list[dict], str | None]] = [(result.messages, None)]
    if history:
        streams = [(history, f"══ before compaction: {_plural(len(history), 'entry', 'entries')}, "
                             "not what a resume restores ".ljust(60, "═")),
                   (result.messages, "══ after compaction: what a resume restores ".ljust(60, "═"))]
    for msgs, banner in streams:
        if banner:
            lines.append(paint(banner, fg="yellow", bold=True))
            last_turn = None
        for msg in msgs:
            kind = msg.get("type")
            stamp = msg.get("timestamp")
            when = local_time(stamp) if isinstance(stamp, str) else ""
            if kind in ("user", "assistant"):
                inner = msg.get("message") or {}
                content = inner.get("content")
                body = render_blocks(content)
                if not body:
                    continue
                # One header per API response (its blocks are separate entries sharing
                # message.id) and none for tool results, which belong to the call above.
                results_only = isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
                turn = ("assistant", inner.get("id")) if kind == "assistant" else ("results",) if results_only else None
                if turn is None or turn != last_turn and not results_only:
                    tag = " (synthetic)" if msg.get("synthetic") else ""
                    lines.append(paint(f"── {kind}{tag} {when} ".ljust(60, "─"), fg="cyan" if kind == "user" else "green", bold=True))
                last_turn = turn
                lines.extend(paint(b, dim=True) if b.startswith("  ") else paint(b) for b in body)
            elif kind in ("system", "attachment"):
                if all_entries:
                    lines.append(paint(_noise(kind, msg), dim=True))
                else:
                    hidden[kind] += 1
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
    if any(hidden.values()):
        what = " and ".join(_plural(n, one, many) for n, one, many in (
            (hidden["attachment"], "attachment", "attachments"), (hidden["system"], "system entry", "system entries")) if n)
        lines.append(paint(f"{what} not shown (--all-entries shows them)", dim=True))
    return "\n".join(lines)
