"""Lite read (SPEC 5): what the first and last 64 KB of a transcript say about it.

Why a lite read: a session list must stay instant with thousands of multi-MB
transcripts, so it never parses a whole file. Claude Code reads the first and the
last 64 KB of each file and so do we, with the same windows and the same rules, so
a root pointed at ``~/.claude`` shows the titles Claude Code's picker shows:

* head → first meaningful prompt, createdAt, cwd, gitBranch, sessionId, sidechain
  flag, teamName;
* tail → customTitle, aiTitle, lastPrompt, tag, summary, the LAST occurrence of
  each winning (metadata is re-appended at EOF, SPEC 3.5, to stay in this window);
* title = customTitle, else aiTitle, else summary, else first prompt.

Why typed partial decodes: lines are decoded with msgspec Structs naming only the
few fields needed (the rest is skipped without building objects), and most lines
are not decoded at all. The head is decoded line by line only up to the first
prompt. The tail is walked newest-first; since Claude Code writes metadata
entries type-first (``{"type":"custom-title",...``) and messages
parentUuid-first, a ``startswith`` tells which lines can hold a tail field, and
only those and lines of any other shape are decoded. A field is taken only from
the top level of an entry of the right ``type``, so a tool input that happens to
contain ``"summary"`` or ``"tag"`` never leaks in. (Multi-byte ``bytes.find``
over 64 KB costs 20-40 µs here; ``memchr`` for a newline well under 1 µs.)

Window edges: the tail window starts mid-line unless the byte before it is a
newline (we read one extra byte to know), so its first partial line is dropped;
the head window usually ends mid-line, and when that cut line is the first
prompt (a prompt bigger than 64 KB) the prompt is salvaged from the cut JSON
string, so such a session keeps a (truncated) prompt instead of vanishing.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec

from .entries import MATERIALIZING_TYPES, decode_object, mask_lone_surrogates
from .regular import open_regular
from .session_info import SessionInfo  # noqa: F401  (what the lite read fills; listing and the catalog import it from here)

LITE_WINDOW: Final = 65536
"""Bytes read at each end of a file (Claude Code's LITE_READ_BUF_SIZE)."""

PROMPT_MAX: Final = 200
"""Prompts are shown on one line, cut at 200 characters plus an ellipsis, as
Claude Code writes ``lastPrompt`` — so firstPrompt and lastPrompt look alike."""

# Lite states. Only SESSION is listed; the others say why a file is not a session.
SESSION: Final = "session"
EMPTY: Final = "empty"  # no parseable entry at all (0 bytes, blank or torn lines)
METADATA_ONLY: Final = "metadata-only"  # entries, but no user/assistant message
SIDECHAIN: Final = "sidechain"  # first entry is a sidechain: a subagent transcript
TEAM: Final = "team"  # carries a teamName: a swarm teammate's transcript

Opener = Callable[[str], int]
"""``path -> fd`` (like ``os.open``); tests and benchmarks pass one to count opens."""


def default_opener(path: str) -> int:
    return open_regular(path)


# --------------------------------------------------------------------------- types


class LiteInfo(msgspec.Struct, kw_only=True):
    """Everything the two windows say about one file, listable or not."""

    path: str
    size: int
    mtime_ns: int
    state: str = EMPTY
    session_id: str | None = None
    first_prompt: str | None = None
    created_at: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    is_sidechain: bool = False
    team_name: str | None = None
    custom_title: str | None = None
    ai_title: str | None = None
    last_prompt: str | None = None
    tag: str | None = None
    summary: str | None = None
    last_entry_at: str | None = None
    message_count: int | None = None

    @property
    def listable(self) -> bool:
        return self.state == SESSION

    @property
    def title(self) -> str | None:
        return self.custom_title or self.ai_title or self.summary or self.first_prompt

    def session_info(self, session_id: str | None = None) -> SessionInfo:
        """The listing record; the id defaults to the file name (what resume takes)."""
        sid = session_id or os.path.basename(self.path).removesuffix(".jsonl")
        return SessionInfo(
            sessionId=sid,
            path=self.path,
            title=self.title,
            firstPrompt=self.first_prompt,
            lastPrompt=self.last_prompt,
            customTitle=self.custom_title,
            aiTitle=self.ai_title,
            summary=self.summary,
            tag=self.tag,
            createdAt=self.created_at,
            modifiedAt=iso_utc(self.mtime_ns),
            size=self.size,
            cwd=self.cwd,
            gitBranch=self.git_branch,
            lastEntryAt=self.last_entry_at,
            messageCount=self.message_count,
        )


def iso_utc(ns: int) -> str:
    """``2026-01-31T07:15:51.765Z``: the timestamp format transcripts use."""
    sec, rem = divmod(ns, 1_000_000_000)
    t = time.gmtime(sec)
    return (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{rem // 1_000_000:03d}Z")


# Typed partial decoders: only the named fields are materialized.


class _Block(msgspec.Struct):
    type: str | None = None
    text: str | None = None


class _Message(msgspec.Struct):
    content: str | list[_Block] | None = None


_NULL: Final = msgspec.Raw(b"null")


class _Head(msgspec.Struct):
    type: str | None = None
    timestamp: str | None = None
    cwd: str | None = None
    gitBranch: str | None = None
    sessionId: str | None = None
    isSidechain: bool | None = None
    isMeta: bool | None = None
    isCompactSummary: bool | None = None
    teamName: str | None = None
    message: msgspec.Raw = _NULL


class _Tail(msgspec.Struct):
    type: str | None = None
    customTitle: str | None = None
    aiTitle: str | None = None
    lastPrompt: str | None = None
    tag: str | None = None
    summary: str | None = None


_head_dec = msgspec.json.Decoder(_Head)
_tail_dec = msgspec.json.Decoder(_Tail)
_msg_dec = msgspec.json.Decoder(_Message)


_BOOL_FIELDS: Final = frozenset({"isSidechain", "isMeta", "isCompactSummary"})


def _loose(line: bytes, cls: type) -> Any:
    """Slow path for a line whose fields have unexpected types: keep what fits."""
    obj = decode_object(line)
    if obj is None:
        return None
    kw: dict[str, Any] = {}
    for name in cls.__struct_fields__:
        v = obj.get(name)
        if name == "message":
            if isinstance(v, dict):
                kw[name] = msgspec.Raw(msgspec.json.encode(v))
        elif name in _BOOL_FIELDS:
            if isinstance(v, bool):
                kw[name] = v
        elif isinstance(v, str):
            kw[name] = v
    return cls(**kw)


def _decode(dec: msgspec.json.Decoder, cls: type, line: bytes) -> Any:
    """The typed view of one line, or None for a torn/unparseable line."""
    try:
        return dec.decode(line)
    except msgspec.ValidationError:
        return _loose(line, cls)
    except msgspec.DecodeError:
        masked = mask_lone_surrogates(line)
        return None if masked is None else _decode(dec, cls, masked)
    except RecursionError:
        return None


# ------------------------------------------------------------------ prompt rules

_COMMAND = re.compile(r"\s*<command-(?:name|message)>")
_COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>")
_BASH_INPUT = re.compile(r"\s*<bash-input>(.*?)</bash-input>")
# Tag-led text is machinery (<local-command-stdout>, <ide_opened_file>,
# <system-reminder>, <bash-stdout> ...); so are interrupt markers.
_SKIP = re.compile(r"\s*<[a-z][\w-]*[\s>]|\[Request interrupted by user[^\]]*\]")


def clip(text: str, cut: bool = False) -> str:
    """At most PROMPT_MAX chars + ``…`` (Claude Code's ``slice(0, 200).trim() + '…'``).
    ``cut`` marks text that was already cut short by the window."""
    if len(text) > PROMPT_MAX:
        return text[:PROMPT_MAX].strip() + "…"
    return text + "…" if cut else text


def classify_text(raw: str) -> tuple[str, str] | None:
    """``("prompt", text)``, ``("command", "/name args")`` or None (not a prompt).
    Newlines become spaces: a prompt is shown on one line.

    A slash command is not the first prompt, but it is remembered: a session that
    only ran ``/init`` is shown as ``/init`` rather than untitled (Claude Code
    does the same, we add the command's arguments, which say what it was about).
    """
    text = raw.replace("\n", " ").strip()
    if not text:
        return None
    if _COMMAND.match(text):
        name = _COMMAND_NAME.search(text)
        if name is None:
            return None
        args = _COMMAND_ARGS.search(text)
        cmd = name.group(1).strip()
        if args and args.group(1).strip():
            cmd = f"{cmd} {args.group(1).strip()}"
        return ("command", cmd) if cmd else None
    bash = _BASH_INPUT.match(text)
    if bash:
        return ("prompt", "! " + bash.group(1).strip())
    if _SKIP.match(text):
        return None
    return ("prompt", text)


def _message_texts(raw: msgspec.Raw) -> list[str] | None:
    """Text of a user message; None when it is a tool result (never a prompt)."""
    try:
        msg = _msg_dec.decode(raw)
    except msgspec.ValidationError:
        obj = msgspec.json.decode(raw)
        content = obj.get("content") if isinstance(obj, dict) else None
        if isinstance(content, list):
            content = [
                _Block(type=b.get("type") if isinstance(b.get("type"), str) else None,
                       text=b.get("text") if isinstance(b.get("text"), str) else None)
                for b in content if isinstance(b, dict)
            ]
        msg = _Message(content=content if isinstance(content, (str, list)) else None)
    content = msg.content
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    texts = []
    for block in content:
        if block.type == "tool_result":
            return None
        if block.type == "text" and block.text:
            texts.append(block.text)
    return texts


# ------------------------------------------------------------------ head window


class _HeadState:
    __slots__ = ("prompt", "command", "created_at", "cwd", "branch", "sid", "side", "team", "message", "entries")

    def __init__(self) -> None:
        self.prompt: str | None = None
        self.command: str | None = None
        self.created_at: str | None = None
        self.cwd: str | None = None
        self.branch: str | None = None
        self.sid: str | None = None
        self.side: bool | None = None
        self.team: str | None = None
        self.message = False
        self.entries = 0

    def envelope(self, e: _Head) -> None:
        if self.side is None and e.isSidechain is not None:
            self.side = e.isSidechain
        if self.created_at is None and e.timestamp:
            self.created_at = e.timestamp
        if self.cwd is None and e.cwd:
            self.cwd = e.cwd
        if self.branch is None and e.gitBranch:
            self.branch = e.gitBranch
        if self.sid is None and e.sessionId:
            self.sid = e.sessionId
        if e.teamName:
            self.team = e.teamName

    def offer(self, kind_text: tuple[str, str] | None, cut: bool = False) -> None:
        if kind_text is None:
            return
        kind, text = kind_text
        if kind == "prompt":
            self.prompt = clip(text, cut)
        elif self.command is None:
            self.command = clip(text, cut)


_NO_HEAD_FIELDS: Final = b'{"type":"file-history-snapshot"'
"""Often the first and the biggest lines of a file, and never with a field we need."""
_NOT_A_PROMPT: Final = (b'"tool_result"', b'"role":"assistant"')
_PEEK: Final = 1024


def _scan_head(head: bytes, end: int, st: _HeadState) -> None:
    """Decode the complete lines of ``head[:end]`` in order until the first
    prompt, or until the first entry shows a sidechain or team transcript.

    Once the envelope is known, only prompt candidates matter: a big line whose
    first KB shows a tool_result block or an assistant message is passed over
    without decoding (the quoted needles cannot occur inside an escaped string).
    """
    pos = 0
    find, startswith = head.find, head.startswith
    ready = False
    while pos < end:
        nl = find(b"\n", pos, end)
        stop = end if nl < 0 else nl
        if stop == pos:
            pos += 1
            continue
        if startswith(_NO_HEAD_FIELDS, pos):
            st.entries += 1
            pos = stop + 1
            continue
        if ready:
            peek = min(stop, pos + _PEEK)
            if find(_NOT_A_PROMPT[0], pos, peek) >= 0 or find(_NOT_A_PROMPT[1], pos, peek) >= 0:
                pos = stop + 1
                continue
        e = _decode(_head_dec, _Head, head[pos:stop])
        pos = stop + 1
        if e is None:
            continue
        st.entries += 1
        st.envelope(e)
        if st.side or st.team:
            return
        if e.type in MATERIALIZING_TYPES:
            st.message = True
            ready = bool(st.cwd and st.created_at and st.side is not None)
        if e.type != "user" or e.isMeta or e.isCompactSummary or e.isSidechain:
            continue
        for raw in _message_texts(e.message) or ():
            st.offer(classify_text(raw))
            if st.prompt is not None:
                return


# Salvage of a first prompt cut by the head window.
_MESSAGE_KEY = re.compile(rb'"message"\s*:\s*\{')
_USER_TYPE = re.compile(rb'"type"\s*:\s*"user"')
_USER_ROLE = re.compile(rb'\s*"role"\s*:\s*"user"')
_CONTENT_KEY = re.compile(rb'"content"\s*:\s*(["\[])')
_TEXT_KEY = re.compile(rb'"text"\s*:\s*"')
_TRUE = {k: re.compile(rb'"%s"\s*:\s*true' % k) for k in (b"isMeta", b"isCompactSummary", b"isSidechain")}
_STR_FIELD = re.compile(rb'"(cwd|gitBranch|sessionId|timestamp|teamName)"\s*:\s*"((?:[^"\\]+|\\.)*)"')
_STR_BODY = re.compile(rb'(?:[^"\\]+|\\.)*')
_PARTIAL_ESCAPE = re.compile(rb"\\u[0-9a-fA-F]{0,3}$")
_SALVAGE_MAX: Final = 16384


def json_string_prefix(buf: bytes, start: int) -> tuple[str, bool]:
    """The JSON string whose body starts at ``buf[start]``: ``(text, complete)``.

    A string cut by the window loses its partial escape or UTF-8 sequence at the
    end; only the first ``_SALVAGE_MAX`` bytes are looked at (a prompt is shown
    in 200 characters).
    """
    limit = min(len(buf), start + _SALVAGE_MAX)
    end = _STR_BODY.match(buf, start, limit).end()
    complete = end < len(buf) and buf[end : end + 1] == b'"'
    frag = buf[start:end]
    if not complete:
        frag = _PARTIAL_ESCAPE.sub(b"", frag)
        if (len(frag) - len(frag.rstrip(b"\\"))) % 2:
            frag = frag[:-1]
    for _ in range(12):
        try:
            return msgspec.json.decode(b'"' + frag + b'"', type=str), complete
        except msgspec.DecodeError:
            frag = frag[:-1]
    return "", False


def _salvage(seg: bytes, st: _HeadState) -> None:
    """Best effort on the head's cut last line: a user entry's envelope and text."""
    m = _MESSAGE_KEY.search(seg)
    if m is None:
        return
    before = seg[: m.start()]
    for key, value in _STR_FIELD.findall(before):
        try:
            text = msgspec.json.decode(b'"' + value + b'"', type=str)
        except msgspec.DecodeError:
            continue
        name = key.decode()
        if name == "teamName":
            st.team = st.team or text
        elif name == "timestamp":
            st.created_at = st.created_at or text
        elif name == "gitBranch":
            st.branch = st.branch or text or None
        elif name == "cwd":
            st.cwd = st.cwd or text
        else:
            st.sid = st.sid or text
    sidechain = bool(_TRUE[b"isSidechain"].search(before))
    if st.side is None and b'"isSidechain"' in before:
        st.side = sidechain
    if not (_USER_TYPE.search(before) or _USER_ROLE.match(seg, m.end())):
        return
    if not sidechain:
        st.message = True
    if sidechain or _TRUE[b"isMeta"].search(before) or _TRUE[b"isCompactSummary"].search(before):
        return
    c = _CONTENT_KEY.search(seg, m.end())
    if c is None:
        return
    if c.group(1) == b'"':
        starts = [c.end()]
    else:
        if b'"tool_result"' in seg[c.end() :]:
            return
        starts = [t.end() for t in _TEXT_KEY.finditer(seg, c.end())]
    for s in starts:
        text, complete = json_string_prefix(seg, s)
        st.offer(classify_text(text), cut=not complete)
        if st.prompt is not None:
            return


# ------------------------------------------------------------------ tail window

_TAIL_KINDS: Final = {
    "custom-title": ("custom_title", "customTitle"),
    "ai-title": ("ai_title", "aiTitle"),
    "last-prompt": ("last_prompt", "lastPrompt"),
    "tag": ("tag", "tag"),
    "summary": ("summary", "summary"),
}
# Claude Code (and sessiond's client) write metadata entries type-first and
# transcript messages parentUuid-first; these prefixes let the tail scan skip
# every other line with two C-level ``startswith`` calls instead of a decode.
_TYPE_FIRST: Final = b'{"type":"'
_MESSAGE_FIRST: Final = b'{"parentUuid"'
_WANTED_PREFIXES: Final = tuple(b'{"type":"%s"' % k.encode() for k in _TAIL_KINDS)
_KNOWN_PREFIXES: Final = (_MESSAGE_FIRST, _TYPE_FIRST)


def _scan_tail(buf: bytes, start: int, end: int) -> tuple[dict[str, str | None], int]:
    """Newest-first walk over the complete lines of ``buf[start:end]``: the LAST
    value of each tail field (an emptied value, e.g. a removed tag, is None), and
    how many lines were decoded. Lines of unknown shape are decoded too, so a
    writer that orders keys differently is still read, only more slowly."""
    found: dict[str, str | None] = {}
    parsed = 0
    rfind, startswith = buf.rfind, buf.startswith
    pos = end
    while pos > start:
        ls = rfind(b"\n", start, pos) + 1 or start
        if pos > ls and (startswith(_WANTED_PREFIXES, ls) or not startswith(_KNOWN_PREFIXES, ls)):
            e = _decode(_tail_dec, _Tail, buf[ls:pos])
            if e is not None:
                parsed += 1
                kind = _TAIL_KINDS.get(e.type)  # type: ignore[arg-type]
                if kind is not None and kind[0] not in found:
                    found[kind[0]] = getattr(e, kind[1]) or None
                    if len(found) == len(_TAIL_KINDS):
                        break
        pos = ls - 1
    return found, parsed


def _tail_probe(buf: bytes, start: int, end: int, st: _HeadState) -> None:
    """The head showed no message, or no envelope (a huge first prompt cut before
    its cwd): take both from the newest user/assistant entry of the tail."""
    for line in reversed(buf[start:end].split(b"\n")):
        if b'"user"' not in line and b'"assistant"' not in line:
            continue
        e = _decode(_head_dec, _Head, line)
        if e is None or e.type not in MATERIALIZING_TYPES:
            continue
        st.entries += 1
        if st.side is None:
            st.side = bool(e.isSidechain)
        if e.teamName:
            st.team = e.teamName
        if not e.isSidechain:
            st.message = True
            st.cwd = st.cwd or e.cwd
            st.branch = st.branch or e.gitBranch or None
            st.sid = st.sid or e.sessionId
            return


# ------------------------------------------------ last write and message count


class _Stamp(msgspec.Struct):
    timestamp: str | None = None


class _Counted(msgspec.Struct):
    type: str | None = None
    subtype: str | None = None
    messageCount: int | None = None
    isSidechain: bool | None = None


_stamp_dec = msgspec.json.Decoder(_Stamp)
_counted_dec = msgspec.json.Decoder(_Counted)
_counted_list_dec = msgspec.json.Decoder(list[_Counted])
_STAMP_KEY: Final = b'"timestamp":"'
_TURN_KEY: Final = b'"subtype":"turn_duration"'
_CANDIDATES: Final = 8
"""Newest lines with the key looked at before giving up (a nested object can
carry the key; a top-level one is almost always on the newest line)."""


def _newest_with(buf: bytes, start: int, end: int, key: bytes, dec: msgspec.json.Decoder, ok: Callable[[Any], bool]) -> Any:
    """The newest complete line of ``buf[start:end]`` holding ``key`` whose
    top-level decode passes ``ok`` (found by a C-level ``rfind``, one decode per
    candidate line), or None."""
    pos = end
    for _ in range(_CANDIDATES):
        i = buf.rfind(key, start, pos)
        if i < 0:
            return None
        ls = buf.rfind(b"\n", start, i) + 1 or start
        le = buf.find(b"\n", i, end)
        try:
            e = dec.decode(buf[ls : end if le < 0 else le])
        except msgspec.DecodeError:
            e = None
        if e is not None and ok(e):
            return e
        pos = ls
    return None


def _counted_or_none(line: bytes) -> _Counted | None:
    try:
        return _counted_dec.decode(line)
    except msgspec.DecodeError:
        return None


def _last_entry_at(buf: bytes, start: int, end: int) -> str | None:
    e = _newest_with(buf, start, end, _STAMP_KEY, _stamp_dec, lambda e: isinstance(e.timestamp, str))
    return e.timestamp if e is not None else None


def _message_count(buf: bytes, start: int, end: int, whole: bool) -> int | None:
    if whole:  # the whole file is here (64 KB at most): count
        lines = [line for line in buf[start:end].split(b"\n") if b'"user"' in line or b'"assistant"' in line]
        try:  # one decode for all of them; a bad line sends it back to one per line
            entries = _counted_list_dec.decode(b"[" + b",".join(lines) + b"]")
        except msgspec.DecodeError:
            entries = [e for e in map(_counted_or_none, lines) if e is not None]
        return sum(e.type in MATERIALIZING_TYPES and not e.isSidechain for e in entries)
    e = _newest_with(buf, start, end, _TURN_KEY, _counted_dec,
                     lambda e: e.subtype == "turn_duration" and isinstance(e.messageCount, int))
    return e.messageCount if e is not None else None


# ------------------------------------------------------------------ entry points


def parse_lite(head: bytes, tail: bytes | None, *, path: str = "", size: int | None = None,
               mtime_ns: int = 0) -> LiteInfo:
    """Lite info from the two windows.

    ``head`` is the first window (the whole file when it is that small). ``tail``
    is None when the head holds the whole file, else the last window plus ONE
    byte before it, so we can tell whether its first line is whole.
    """
    size = len(head) if size is None else size
    info = LiteInfo(path=path, size=size, mtime_ns=mtime_ns)
    whole = tail is None
    # Complete lines of the head; a whole file's last line may lack its newline.
    head_end = len(head) if whole else head.rfind(b"\n") + 1
    st = _HeadState()
    _scan_head(head, head_end, st)
    if st.prompt is None and head_end < len(head):
        _salvage(head[head_end:], st)

    if whole:
        buf, start, end = head, 0, len(head)
    else:
        buf, end = tail, len(tail)
        # Byte 0 precedes the window: a newline there means line 1 is whole.
        first_nl = tail.find(b"\n")
        start = end if first_nl < 0 else first_nl + 1
    if not (whole or st.side or st.team) and not (st.message and st.cwd):
        _tail_probe(buf, start, end, st)

    parsed = 0
    if not (st.side or st.team):  # never listed: spare the tail scan
        tail_fields, parsed = _scan_tail(buf, start, end)
        for field, value in tail_fields.items():
            setattr(info, field, value)

    if st.message and not (st.side or st.team):  # listed: when last written, how many messages
        info.last_entry_at = _last_entry_at(buf, start, end)
        info.message_count = _message_count(buf, start, end, whole)
    info.first_prompt = st.prompt or st.command
    info.created_at = st.created_at
    info.cwd = st.cwd
    info.git_branch = st.branch
    info.session_id = st.sid
    info.is_sidechain = bool(st.side)
    info.team_name = st.team
    if info.is_sidechain:
        info.state = SIDECHAIN
    elif st.team:
        info.state = TEAM
    elif st.message:
        info.state = SESSION
    elif st.entries or parsed:
        info.state = METADATA_ONLY
    else:
        info.state = EMPTY
    return info


def read_lite(path: str | os.PathLike[str], *, opener: Opener | None = None,
              window: int = LITE_WINDOW) -> LiteInfo:
    """Open, fstat, read both windows, close: at most two ``pread`` calls.

    Raises OSError (FileNotFoundError when the file vanished since it was listed).
    """
    p = os.fspath(path)
    fd = (opener or default_opener)(p)
    try:
        st = os.fstat(fd)
        size = st.st_size
        head = os.pread(fd, window, 0) if size else b""
        tail = os.pread(fd, window + 1, size - window - 1) if size > window else None
    finally:
        os.close(fd)
    if tail is not None and len(head) < window:  # shrank under us: what we have is all
        tail = None
    return parse_lite(head, tail, path=p, size=size, mtime_ns=st.st_mtime_ns)
