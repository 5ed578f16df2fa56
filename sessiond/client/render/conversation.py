"""The view model of a conversation: what a person reads, as typed display items.

Input: the messages a resume restores (``resume.pipeline.Resumed.messages``),
optionally the file's raw bookkeeping entries (progress, file-history
snapshots: ``--all-entries``). Output: :class:`Turn` items, each a role, a time
and a uuid (anchors, deep links) holding blocks: :class:`Text` (Markdown
source), :class:`Thinking`, :class:`ToolCall` (a one-line *gist* of its input,
its :class:`ToolResult` paired under it by ``tool_use_id``, the subagent it
started when known), :class:`Image` and :class:`Notice`.

A notice is whatever the harness put into the conversation that is not a
person's words nor the model's: slash-command markup
(``<command-name>``/``<command-message>``/``<command-args>``, shown as ``/name
args``), local command output and its caveat, IDE selections and opened files,
system reminders, ``!`` shell input and output, meta expansions (``isMeta``
entries: ``/init``'s prompt, skill bodies), compaction summaries, interruption
marks. The markup is recognised as a class, not a list: any element whose name
holds ``-`` or ``_`` (no HTML element's does) standing at the top level of a
user's text is harness markup and becomes a notice with a label and a one-line
gist (the full text kept for a renderer that can fold it); a name not known
gets a label made from the name. No raw markup ever reaches a :class:`Text`.

Bookkeeping (attachments, system entries such as turn durations and hook
summaries, progress, snapshots) is hidden and counted (:attr:`Turns.hidden`),
or shown as one-line notices with ``all_entries``.

Pure but for :func:`conversation_view`'s title look-up and
:func:`bookkeeping_entries`' read; renderers (``render.html``,
``render.markdown``, the terminal) only draw these items.

Public API: the items (:class:`Turn`, :class:`Text`, :class:`Thinking`,
:class:`ToolCall`, :class:`ToolResult`, :class:`Image`, :class:`Notice`,
``Block``), :class:`Turns`, :class:`Subagent`, :class:`ConversationView`;
:func:`build_turns`, :func:`conversation_view`, :func:`bookkeeping_entries`,
:func:`walk_blocks`, :func:`split_markup`, :func:`tool_result`,
:func:`tool_gist`; shared wording: :func:`one_line`, :func:`strip_ansi`,
:func:`time_text`, :func:`hidden_summary`, :func:`input_fields`,
:func:`safe_link`, :func:`agent_anchor`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from sessiond.client.resume.pipeline import Resumed

GIST_MAX = 200
"""The longest gist, in characters (an ellipsis ends a longer one)."""

MESSAGE_TYPES = frozenset({"user", "assistant", "system", "attachment"})

SHOWN_SYSTEM = frozenset({"compact_boundary", "microcompact_boundary", "local_command", "api_error"})
"""System entry subtypes that are part of the conversation (a compaction, a
slash command's record, an API error); every other one is bookkeeping."""

SHOWN_ATTACHMENTS = frozenset({"queued_command"})
"""Attachment types that carry the person's words (a prompt typed while the
agent worked); every other attachment is bookkeeping."""


# ------------------------------------------------------------------ the items


class Text(msgspec.Struct, tag="text"):
    """Prose of a person or the model: Markdown source, markup-free."""

    text: str


class Thinking(msgspec.Struct, tag="thinking"):
    """The model's visible reasoning (renderers fold or hide it)."""

    text: str


class Image(msgspec.Struct, tag="image"):
    """An image block: noted, never loaded (a renderer shows its type)."""

    media_type: str = "image"


class Notice(msgspec.Struct, tag="notice"):
    """Something the harness put in the conversation, shown as what it is: a
    dim one-line ``label: gist``; ``text`` is the whole of it for a renderer
    that can fold it open (a skill body, a command's output).

    ``kind`` is one of ``command``, ``command-output``, ``caveat``, ``ide``,
    ``reminder``, ``shell``, ``shell-output``, ``hook``, ``meta``,
    ``compact-summary``, ``compaction``, ``interrupted``, ``api-error``,
    ``queued``, ``markup`` (an element not named here), ``entry`` (bookkeeping
    shown with ``all_entries``)."""

    kind: str
    label: str
    gist: str
    text: str = ""


class ToolResult(msgspec.Struct, tag="tool_result"):
    """What a tool returned: its text with newlines kept (``<system-reminder>``s
    the harness appended taken out into ``notices``), whether it is an error,
    how many images it held. Under its call, or alone when the call is not in
    the view (``tool_use_id`` says which)."""

    tool_use_id: str
    text: str
    is_error: bool = False
    images: int = 0
    notices: list[Notice] = []
    time: str | None = None
    uuid: str | None = None


class ToolCall(msgspec.Struct, tag="tool_call"):
    """A tool call: its name, the gist of its input (Bash: the command;
    Read/Write/Edit: the file path; Grep/Glob: the pattern; WebFetch: the
    url; Task/Agent: the description; else compact JSON), the input itself,
    its result when the view holds it, and the subagent it started (``agent``)
    when the result names it."""

    id: str
    name: str
    gist: str
    input: Any
    result: ToolResult | None = None
    agent: str | None = None


Block = Text | Thinking | ToolCall | ToolResult | Image | Notice


class Turn(msgspec.Struct):
    """One turn a person reads: a role (``user``, ``assistant``, ``system``,
    ``tool`` for results whose call is not in view), the ISO-8601 time of its
    first entry, the uuid of its first entry (the anchor ``m-<uuid>``), its
    blocks in order. One API response (entries sharing ``message.id``) is one
    turn; tool results are paired under their calls and make no turn.
    ``meta``: made by the harness, not typed by the person (``isMeta``,
    synthetic, a compaction summary, shown bookkeeping)."""

    role: str
    time: str | None
    uuid: str | None
    blocks: list[Block]
    model: str | None = None
    meta: bool = False
    response: str | None = None
    """An assistant turn's ``message.id``: a renderer fed one entry at a time
    (``watch``) continues the turn it showed last when the next has the same."""


class Turns(msgspec.Struct):
    """The turns of a message list and what was hidden, by kind
    (``attachment``, ``system``, ``progress``, ``file-history-snapshot``...)."""

    turns: list[Turn]
    hidden: dict[str, int]


class Subagent(msgspec.Struct):
    """A subagent's conversation: linked from the call that started it."""

    agent: str
    turns: list[Turn]
    hidden: dict[str, int] = {}


class ConversationView(msgspec.Struct):
    """A whole session as it is shown: title, id, file, the turns a resume
    restores, the turns before the last compaction (``history``, shown
    collapsed), each subagent's, hidden counts, first and last times,
    how many messages, whether its secrets were redacted."""

    session_id: str | None
    title: str
    path: str
    turns: list[Turn]
    hidden: dict[str, int] = {}
    history: list[Turn] = []
    subagents: list[Subagent] = []
    first: str | None = None
    last: str | None = None
    messages: int = 0
    redacted: bool = False
    interruption: str = "none"
    agents: list[str] = []
    """Ids of the subagents that have a transcript (``Resumed.subagents``):
    a call's subagent is linked only when it is one of them."""


# -------------------------------------------------------------------- helpers

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""A CSI sequence (colours, erasing, cursor moves): parameters only, no
text. An OSC (a title, a hyperlink's address, a clipboard write) carries
text, so it is kept, for the renderers to show (``printable``)."""

_MARKUP = re.compile(r"<([A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+)(?:\s[^<>]*)?>(.*?)</\1\s*>", re.DOTALL)
"""A harness element: a name with ``-`` or ``_`` (``command-name``,
``ide_selection``, ``system-reminder``...), its body, its closing tag."""

_INTERRUPTED = re.compile(r"\[Request interrupted by user[^\]\n]*\]")


def strip_ansi(text: str) -> str:
    """``text`` without its CSI sequences (a local command's coloured output),
    nothing of what it says dropped: an OSC's text stays (``_ANSI``), or a
    call's one-line gist could hide part of the command it ran."""
    return _ANSI.sub("", text)


def one_line(text: Any, limit: int = GIST_MAX) -> str:
    """``text`` on one line (whitespace runs as one space, CSI sequences dropped),
    at most ``limit`` characters, an ellipsis ending a longer one."""
    flat = " ".join(strip_ansi(str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _compact_json(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return str(value)


_GIST_KEYS: dict[str, tuple[str, ...]] = {
    "bash": ("command",),
    "read": ("file_path",),
    "write": ("file_path",),
    "edit": ("file_path",),
    "multiedit": ("file_path",),
    "notebookedit": ("notebook_path",),
    "notebookread": ("notebook_path",),
    "grep": ("pattern",),
    "glob": ("pattern",),
    "webfetch": ("url",),
    "websearch": ("query",),
    "task": ("description",),
    "agent": ("description",),
    "skill": ("skill", "command"),
    "slashcommand": ("command",),
    "bashoutput": ("bash_id", "shell_id"),
    "killshell": ("shell_id",),
    "killbash": ("shell_id",),
    "ls": ("path",),
    "toolsearch": ("query",),
}

_GENERIC_KEYS = ("command", "file_path", "notebook_path", "path", "pattern", "url", "query", "subject", "description",
                 "prompt", "name")
"""The input field a tool not named above is most likely about (an MCP
tool's, a new one's): the first of these that is a non-empty string."""


def tool_gist(name: str, args: Any, agent: str | None = None) -> str:
    """The one-line gist of a tool call's input (see :class:`ToolCall`);
    ``agent``: the subagent a Task/Agent call started, added when known."""
    keys = _GIST_KEYS.get(name.lower())
    gist = ""
    if isinstance(args, dict) and keys:
        gist = next((str(args[k]) for k in keys if isinstance(args.get(k), str | int) and str(args[k]).strip()), "")
        if gist and name.lower() == "grep" and isinstance(args.get("path"), str):
            gist += f" in {args['path']}"
    if name.lower() == "todowrite" and isinstance(args, dict) and isinstance(args.get("todos"), list):
        gist = f"{len(args['todos'])} todo{'s' if len(args['todos']) != 1 else ''}"
    if not gist and isinstance(args, dict):
        gist = next((args[k] for k in _GENERIC_KEYS if isinstance(args.get(k), str) and args[k].strip()), "")
    if not gist:
        gist = _compact_json(args) if args not in (None, {}) else ""
    if agent:
        gist = f"{gist} (subagent {agent})" if gist else f"subagent {agent}"
    return one_line(gist)


def _label(name: str) -> str:
    return name.replace("-", " ").replace("_", " ")


_NOTICE_KINDS: dict[str, tuple[str, str]] = {
    "local-command-stdout": ("command-output", "command output"),
    "local-command-stderr": ("command-output", "command error"),
    "local-command-caveat": ("caveat", "local command caveat"),
    "bash-input": ("shell", "shell"),
    "bash-stdout": ("shell-output", "shell output"),
    "bash-stderr": ("shell-output", "shell error"),
    "ide-selection": ("ide", "IDE selection"),
    "ide-opened-file": ("ide", "IDE opened file"),
    "system-reminder": ("reminder", "system reminder"),
    "user-prompt-submit-hook": ("hook", "hook output"),
    "user-memory-input": ("meta", "memory"),
}


def _element_notice(name: str, body: str) -> Notice:
    key = name.lower().replace("_", "-")
    kind, label = _NOTICE_KINDS.get(key, ("markup", _label(key)))
    body = strip_ansi(body).strip()
    gist = one_line(body)
    if kind == "shell":
        gist = one_line("! " + body)
    return Notice(kind, label, gist or "(empty)", body)


def _command_notice(parts: dict[str, str]) -> Notice:
    """``/name args`` from a run of ``command-*`` elements."""
    name = parts.get("name", "").strip()
    if not name:
        name = parts.get("message", "").strip().removesuffix("is running…").removesuffix("is running...").strip()
    if name and not name.startswith("/"):
        name = "/" + name
    args = parts.get("args", "").strip()
    body = parts.get("contents", "").strip()  # an expanded command's text; the args are in the gist
    return Notice("command", "command", one_line(f"{name} {args}".strip()) or "(command)", strip_ansi(body))


def split_markup(text: str) -> list[Text | Notice]:
    """A user's text as prose and notices: each top-level harness element
    (see ``_MARKUP``) a :class:`Notice` (a run of ``command-*`` elements one
    ``/name args`` notice), an interruption mark a notice, the prose between
    them :class:`Text` (stripped, empty runs dropped)."""
    out: list[Text | Notice] = []
    command: dict[str, str] = {}

    def flush() -> None:
        if command:
            out.append(_command_notice(command))
            command.clear()

    def prose(chunk: str) -> None:
        pos = 0
        for m in _INTERRUPTED.finditer(chunk):
            if chunk[pos : m.start()].strip():
                out.append(Text(chunk[pos : m.start()].strip()))
            out.append(Notice("interrupted", "interrupted", one_line(m.group(0).strip("[]"))))
            pos = m.end()
        if chunk[pos:].strip():
            out.append(Text(chunk[pos:].strip()))

    pos = 0
    for m in _MARKUP.finditer(text):
        before = text[pos : m.start()]
        if before.strip():
            flush()
            prose(before)
        key = m.group(1).lower().replace("_", "-")
        if key.startswith("command-"):
            part = key.removeprefix("command-")
            if part in command:
                flush()
            command[part] = m.group(2)
        else:
            flush()
            out.append(_element_notice(key, m.group(2)))
        pos = m.end()
    flush()
    prose(text[pos:])
    return out


_REMINDER = re.compile(r"<system-reminder>(.*?)</system-reminder>", re.DOTALL)
_TOOL_ERROR = re.compile(r"\A\s*<tool_use_error>(.*)</tool_use_error>\s*\Z", re.DOTALL)


def tool_result(block: dict[str, Any], msg: dict[str, Any] | None = None) -> ToolResult:
    """A ``tool_result`` block as a :class:`ToolResult`: text blocks joined by
    newlines, images counted, appended system reminders made notices, a
    ``<tool_use_error>`` wrapper taken off."""
    content = block.get("content")
    parts: list[str] = []
    images = 0
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                parts.append(str(b.get("text", "")))
            elif isinstance(b, dict) and b.get("type") == "image":
                images += 1
            elif isinstance(b, dict):
                parts.append(f"[{b.get('type', '?')}]")
            else:
                parts.append(str(b))
    elif content is not None:
        parts.append(str(content))
    text = "\n".join(parts)
    notices = [_element_notice("system-reminder", m.group(1)) for m in _REMINDER.finditer(text)]
    if notices:
        text = _REMINDER.sub("", text).rstrip()
    wrapped = _TOOL_ERROR.match(text)
    if wrapped:
        text = wrapped.group(1).strip()
    msg = msg or {}
    return ToolResult(tool_use_id=str(block.get("tool_use_id") or ""), text=text,
                      is_error=bool(block.get("is_error")) or bool(wrapped), images=images, notices=notices,
                      time=msg.get("timestamp") if isinstance(msg.get("timestamp"), str) else None,
                      uuid=msg.get("uuid") if isinstance(msg.get("uuid"), str) else None)


def _blocks_of(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)] if isinstance(content, list) else []


def _meta_notice(text: str) -> Notice:
    """An ``isMeta`` user text (what the harness expanded: a skill's body,
    ``/init``'s prompt, a command's Markdown)."""
    body = text.strip()
    first = next((ln.strip() for ln in body.splitlines() if ln.strip()), "")
    if first.startswith("Base directory for this skill:"):
        label = "skill"
        rest = [ln.strip() for ln in body.splitlines()[1:] if ln.strip()]
        gist = rest[0].lstrip("# ") if rest else first
    else:
        label, gist = "expanded prompt", first.lstrip("# ")
    return Notice("meta", label, one_line(gist) or "(empty)", body)


def _entry_gist(entry: dict[str, Any]) -> str:
    kind = entry.get("type")
    if kind == "attachment":
        att = _dict(entry.get("attachment"))
        rest = {k: v for k, v in att.items() if k != "type"}
        return one_line(f"{att.get('type', '?')} {_compact_json(rest) if rest else ''}")
    if kind == "system":
        return one_line(f"{entry.get('subtype') or 'system'} {strip_ansi(str(entry.get('content') or ''))}")
    if kind == "progress":
        data = _dict(entry.get("data"))
        return one_line(f"{data.get('type', 'progress')} {_compact_json(data)}")
    return one_line(_compact_json({k: v for k, v in entry.items() if k not in ("type",)}))


def _time(entry: dict[str, Any]) -> str | None:
    ts = entry.get("timestamp")
    if not isinstance(ts, str) and isinstance(entry.get("snapshot"), dict):
        ts = entry["snapshot"].get("timestamp")
    return ts if isinstance(ts, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -------------------------------------------------------------------- building


class _Builder:
    """Walks messages once: turns, the calls by id (results pair under them
    wherever they come), the open assistant turn (blocks of one response)."""

    def __init__(self, all_entries: bool) -> None:
        self.all_entries = all_entries
        self.turns: list[Turn] = []
        self.hidden: dict[str, int] = {}
        self.calls: dict[str, ToolCall] = {}
        self.open: Turn | None = None
        self.open_id: Any = None
        self.paired: list[ToolCall] = []
        """Calls given their result by the last message added (``LiveView``)."""

    def hide(self, entry: dict[str, Any], kind: str) -> None:
        """Count ``entry`` under ``kind`` (its type), or with ``all_entries``
        show it as a notice named by it. A type is any writer's string: it is
        named on one line, or its line breaks would draw lines of their own
        (a turn's header, a prompt never typed)."""
        kind = one_line(kind)
        if self.all_entries:
            self.close()
            self.turns.append(Turn("system", _time(entry), _str(entry.get("uuid")),
                                   [Notice("entry", kind, _entry_gist(entry))], meta=True))
        else:
            self.hidden[kind] = self.hidden.get(kind, 0) + 1

    def close(self) -> None:
        self.open, self.open_id = None, None

    def add(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "assistant":
            self.assistant(msg)
        elif kind == "user":
            self.user(msg)
        elif kind == "system":
            self.system(msg)
        elif kind == "attachment":
            att = _dict(msg.get("attachment"))
            if att.get("type") in SHOWN_ATTACHMENTS:
                raw = att.get("prompt")
                prompt = raw if isinstance(raw, str) else "\n".join(
                    str(b.get("text", "")) for b in _blocks_of(raw) if b.get("type") == "text") or _compact_json(raw)
                self.close()
                self.turns.append(Turn("user", _time(msg), _str(msg.get("uuid")),
                                       [Notice("queued", "queued prompt", one_line(prompt), prompt)]))
            else:
                self.hide(msg, "attachment")
        elif isinstance(kind, str):
            self.hide(msg, kind)

    def assistant(self, msg: dict[str, Any]) -> None:
        inner = _dict(msg.get("message"))
        mid = inner.get("id")
        blocks: list[Block] = []
        for b in _blocks_of(inner.get("content")):
            t = b.get("type")
            if t == "text" and str(b.get("text", "")).strip():
                blocks.append(Text(str(b["text"]).strip()))
            elif t in ("thinking", "redacted_thinking") and b.get("thinking"):
                blocks.append(Thinking(str(b["thinking"])))
            elif t in ("tool_use", "server_tool_use"):
                name = str(b.get("name") or "tool")
                call = ToolCall(id=str(b.get("id") or ""), name=name, gist=tool_gist(name, b.get("input")),
                                input=b.get("input"))
                if call.id:
                    self.calls[call.id] = call
                blocks.append(call)
            elif t == "image":
                blocks.append(Image(_media(b)))
        if not blocks:
            return
        if self.open is not None and mid is not None and mid == self.open_id:
            self.open.blocks.extend(blocks)
            return
        meta = bool(msg.get("isApiErrorMessage") or msg.get("synthetic") or inner.get("model") == "<synthetic>")
        turn = Turn("assistant", _time(msg), _str(msg.get("uuid")), blocks,
                    model=_str(inner.get("model")), meta=meta, response=_str(mid))
        self.turns.append(turn)
        self.open, self.open_id = turn, mid

    def user(self, msg: dict[str, Any]) -> None:
        inner = _dict(msg.get("message"))
        blocks: list[Block] = []
        orphans: list[Block] = []
        meta = bool(msg.get("isMeta"))
        for b in _blocks_of(inner.get("content")):
            t = b.get("type")
            if t == "tool_result":
                result = tool_result(b, msg)
                call = self.calls.get(result.tool_use_id)
                if call is not None and call.result is None:
                    call.result = result
                    self.paired.append(call)
                    agent = _agent_id(msg)
                    if agent and call.name.lower() in ("task", "agent"):
                        call.agent = agent
                        call.gist = tool_gist(call.name, call.input, agent)
                else:
                    orphans.append(result)
            elif t == "text":
                text = str(b.get("text", ""))
                if msg.get("isCompactSummary"):
                    first = next((ln for ln in text.splitlines() if ln.strip()), "")
                    blocks.append(Notice("compact-summary", "compaction summary", one_line(first), text.strip()))
                    continue
                for item in split_markup(text):
                    blocks.append(_meta_notice(item.text) if meta and isinstance(item, Text) else item)
            elif t == "image":
                blocks.append(Image(_media(b)))
        if orphans:
            self.turns.append(Turn("tool", _time(msg), _str(msg.get("uuid")), orphans))
        if blocks:
            self.close()
            self.turns.append(Turn("user", _time(msg), _str(msg.get("uuid")), blocks,
                                   meta=meta or bool(msg.get("isCompactSummary"))))

    def system(self, msg: dict[str, Any]) -> None:
        sub = msg.get("subtype")
        if sub not in SHOWN_SYSTEM:
            self.hide(msg, "system")
            return
        content = strip_ansi(str(msg.get("content") or ""))
        blocks: list[Block]
        if sub in ("compact_boundary", "microcompact_boundary"):
            meta = _dict(msg.get("compactMetadata"))
            how = meta.get("trigger")
            gist = "earlier turns were compacted" + (f" ({how})" if isinstance(how, str) else "")
            if sub == "microcompact_boundary":
                gist = "older tool results were cleared"
            blocks = [Notice("compaction", "compaction", gist)]
        elif sub == "api_error":
            err = msg.get("error")
            blocks = [Notice("api-error", "API error", one_line(content or _compact_json(err)), content)]
        else:
            blocks = list(split_markup(content)) or [Notice("command", "command", "(command)")]
        self.close()
        self.turns.append(Turn("system", _time(msg), _str(msg.get("uuid")), blocks, meta=True))


def _media(block: dict[str, Any]) -> str:
    source = _dict(block.get("source"))
    return one_line(source.get("media_type") or "image", 60)


def _agent_id(msg: dict[str, Any]) -> str | None:
    result = msg.get("toolUseResult")
    if isinstance(result, dict) and isinstance(result.get("agentId"), str) and result["agentId"]:
        return result["agentId"]
    return None


def build_turns(messages: Iterable[dict[str, Any]], *, all_entries: bool = False,
                entries: Iterable[dict[str, Any]] | None = None) -> Turns:
    """The turns of ``messages`` (a resume's, or any slice of them: a result
    whose call is not in the slice is a ``tool`` turn of its own, which is
    what ``watch`` shows as it arrives). ``entries``: the file's raw entries;
    those that are not messages (progress, snapshots...) are counted under
    their type, or with ``all_entries`` shown as notices where their time
    puts them."""
    builder = _Builder(all_entries)
    extra = sorted(((_time(e) or "\uffff", i, e) for i, e in enumerate(entries or ())
                    if isinstance(e, dict) and e.get("type") not in MESSAGE_TYPES and isinstance(e.get("type"), str)),
                   key=lambda t: (t[0], t[1]))
    pos = 0
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        ts = _time(msg)
        while pos < len(extra) and ts is not None and extra[pos][0] < ts:
            builder.hide(extra[pos][2], extra[pos][2]["type"])
            pos += 1
        builder.add(msg)
    for _, _, e in extra[pos:]:
        builder.hide(e, e["type"])
    return Turns(builder.turns, builder.hidden)


class Arrived(msgspec.Struct):
    """What one message added to a :class:`LiveView`: the turns to print.
    ``continues``: the first of them carries more blocks of the turn printed
    just before (the next entry of one API response), so it gets no header.
    A result whose call was shown earlier comes as a ``tool`` turn holding
    that :class:`ToolCall`, its ``result`` now set: printed under a short
    header naming the call."""

    turns: list[Turn]
    continues: bool = False


class LiveView:
    """The view model of a conversation that is still being written, one
    message at a time (``watch``, ``tail``): the same walk as
    :func:`build_turns`, which remembers the calls shown so that a result
    arriving later pairs with its call. Turns already handed out are dropped;
    the calls remembered are the last ``CALLS_KEPT`` (memory stays bounded
    however long the watch)."""

    CALLS_KEPT = 2048

    def __init__(self, *, all_entries: bool = False) -> None:
        self._builder = _Builder(all_entries)

    @property
    def hidden(self) -> dict[str, int]:
        """What was hidden so far, by kind (as :attr:`Turns.hidden`)."""
        return self._builder.hidden

    def add(self, entry: dict[str, Any]) -> Arrived:
        """The turns ``entry`` (any transcript entry) adds to the view."""
        b = self._builder
        before, shown = b.open, len(b.open.blocks) if b.open is not None else 0
        b.paired.clear()
        b.add(entry)
        out = [Turn("tool", _time(entry), _str(entry.get("uuid")), [call]) for call in b.paired]
        continues = False
        if before is not None and b.open is before and len(before.blocks) > shown:
            out.append(Turn(before.role, _time(entry), _str(entry.get("uuid")), before.blocks[shown:],
                            model=before.model, meta=before.meta, response=before.response))
            continues = not b.paired
        out.extend(b.turns)
        b.turns.clear()
        while len(b.calls) > self.CALLS_KEPT:
            del b.calls[next(iter(b.calls))]
        return Arrived(out, continues)


def bookkeeping_entries(path: str | Path) -> list[dict[str, Any]]:
    """The entries of the transcript at ``path`` that belong to turns but are
    not messages (progress, file-history snapshots, queue operations: each has
    a ``uuid`` or a ``messageId``), in file order: what ``build_turns(entries=...)``
    counts, or shows with ``all_entries``. Session metadata (titles, modes) is not
    among them."""
    from sessiond.store.entries import decode_object
    from sessiond.store.jsonl import iter_lines

    out = []
    for line in iter_lines(path):
        obj = decode_object(line)
        if obj is not None and obj.get("type") not in MESSAGE_TYPES and (obj.get("uuid") or obj.get("messageId")):
            out.append(obj)
    return out


def conversation_view(resumed: Resumed, *, title: str | None = None, history: Sequence[dict[str, Any]] = (),
                      subagents: Sequence[tuple[str, Resumed]] = (), all_entries: bool = False,
                      entries: Iterable[dict[str, Any]] | None = None, redacted: bool = False) -> ConversationView:
    """A resumed session as a :class:`ConversationView`: ``title`` defaults to
    the one every command shows (``lite.session_title``); ``history``: the
    messages before the last compaction (``resume.history.pre_compaction``);
    ``subagents``: (agent id, its resumed conversation)."""
    if title is None:
        from sessiond.store.lite import UNTITLED, session_title

        title = session_title(resumed.path) or UNTITLED
    main = build_turns(resumed.messages, all_entries=all_entries, entries=entries)
    stamps = [m["timestamp"] for m in resumed.messages if isinstance(m.get("timestamp"), str)]
    subs = []
    for agent, sub in subagents:
        built = build_turns(sub.messages, all_entries=all_entries)
        subs.append(Subagent(agent, built.turns, built.hidden))
    return ConversationView(
        session_id=resumed.sessionId, title=title, path=resumed.path, turns=main.turns, hidden=main.hidden,
        history=build_turns(history, all_entries=all_entries).turns if history else [],
        subagents=subs, first=min(stamps) if stamps else None, last=max(stamps) if stamps else None,
        messages=len(resumed.chain), redacted=redacted, interruption=str(resumed.interruption),
        agents=sorted({*resumed.subagents, *(s.agent for s in subs)}))


def walk_blocks(turns: Iterable[Turn]) -> Iterable[Block]:
    """Every block of ``turns``, the results under their calls and the notices
    under results included: what a check over a whole view iterates."""
    for turn in turns:
        for block in turn.blocks:
            yield block
            result = block.result if isinstance(block, ToolCall) else block if isinstance(block, ToolResult) else None
            if isinstance(block, ToolCall) and result is not None:
                yield result
            if result is not None:
                yield from result.notices


# ----------------------------------------------------------- shared wording


When = Callable[[str | None], str]
"""How a renderer shows a time (default :func:`time_text`: local, with its zone)."""


def time_text(iso: str | None) -> str:
    """An entry's ISO-8601 time as a reader of a document wants it: in the
    local zone (``TZ``), with the date, to the second and with the zone's
    name (``2025-03-04 11:00:05 CET``), since a document is read on other days
    and maybe elsewhere. ``?`` for a missing or unreadable time."""
    from sessiond.store.entries import entry_time

    when = entry_time(iso)
    if when is None:
        return "?"
    when = when.astimezone()
    return when.strftime("%Y-%m-%d %H:%M:%S ") + (when.strftime("%Z") or when.strftime("%z"))


def hidden_summary(hidden: dict[str, int]) -> str:
    """``3 attachments, 1 system entry and 12 progress entries not shown``, or
    "" when nothing was hidden: the same words in every rendering."""
    parts = []
    for kind, n in sorted(hidden.items(), key=lambda kv: (kv[0] != "attachment", kv[0] != "system", kv[0])):
        if n:
            noun = ("attachment" if n == 1 else "attachments") if kind == "attachment" else \
                f"{kind} {'entry' if n == 1 else 'entries'}"
            parts.append(f"{n} {noun}")
    if not parts:
        return ""
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"{listed} not shown"


def input_fields(value: Any) -> list[tuple[str, str]]:
    """A tool call's input as (name, text) rows a renderer shows one under the
    other: a string as it is (a command, a file's new content, newlines kept),
    anything else as indented JSON; a non-object input is one ``input`` row."""
    def text(v: Any) -> str:
        if isinstance(v, str):
            return v
        try:
            return msgspec.json.format(msgspec.json.encode(v), indent=2).decode()
        except (TypeError, msgspec.EncodeError):
            return str(v)

    if value is None or value == {}:
        return []
    if isinstance(value, dict):
        return [(str(k), text(v)) for k, v in value.items()]
    return [("input", text(value))]


_SAFE_LINK = re.compile(r"\A(?:https?://|mailto:|#)", re.IGNORECASE)


def safe_link(url: str) -> bool:
    """Whether a link from a transcript may be followed from a rendering:
    http(s), mailto or an in-page anchor; anything else (``javascript:``,
    ``data:``, ``file:``, a relative path) stays text."""
    return bool(_SAFE_LINK.match(url.strip()))


def agent_anchor(agent: str) -> str:
    """The in-page anchor of a subagent's section: ``subagent-`` and its id
    lowercased, anything but ``a-z0-9_-`` as ``-`` (an id comes from a file
    name, and lands in an attribute and a URL)."""
    return "subagent-" + re.sub(r"[^a-z0-9_-]", "-", agent.lower())
