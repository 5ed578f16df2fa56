"""The head window of a lite read: envelope and first prompt (SPEC 5).

Why its own module: the first 64 KB say who the session is (createdAt, cwd,
gitBranch, sessionId, sidechain flag, teamName) and what it began with (the
first meaningful prompt). Its rules are its own: lines are decoded in order
only up to the first prompt, big lines that cannot hold one are passed over
unread, and a first prompt cut by the window's end (a prompt bigger than
64 KB) is salvaged from the cut JSON string, so such a session keeps a
(truncated) prompt instead of vanishing. When the head shows no message or no
envelope, ``probe_tail`` takes both from the newest message of the tail.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from .entries import MATERIALIZING_TYPES
from .lite_decode import NULL, decode_line
from .prompts import classify_text, clip, message_texts


class Head(msgspec.Struct):
    """The fields of an entry the head window reads."""

    type: str | None = None
    timestamp: str | None = None
    cwd: str | None = None
    gitBranch: str | None = None
    sessionId: str | None = None
    isSidechain: bool | None = None
    isMeta: bool | None = None
    isCompactSummary: bool | None = None
    teamName: str | None = None
    forkedFrom: msgspec.Raw = NULL
    message: msgspec.Raw = NULL


_head_dec = msgspec.json.Decoder(Head)


class _Fork(msgspec.Struct):
    sessionId: str | None = None


_fork_dec = msgspec.json.Decoder(_Fork)


def forked_from(raw: msgspec.Raw) -> str | None:
    """The origin session id of an entry's ``forkedFrom`` (``{sessionId,
    messageUuid}``, what ``sessiond fork`` writes on the entries it copies), or
    None when absent or not that shape."""
    if raw is NULL or not raw:
        return None
    try:
        sid = _fork_dec.decode(raw).sessionId
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return sid if isinstance(sid, str) and sid else None


class HeadState:
    """What the head (and, failing it, the tail's newest message) tells so far."""

    __slots__ = ("prompt", "command", "media", "created_at", "cwd", "branch", "sid", "side", "team", "message",
                 "side_message", "entries", "forked_from")

    def __init__(self) -> None:
        self.prompt: str | None = None
        self.command: str | None = None
        self.media: str | None = None
        """"Image" or "Document": what the picker shows for a session that began
        with an attachment and no text."""
        self.created_at: str | None = None
        self.cwd: str | None = None
        self.branch: str | None = None
        self.sid: str | None = None
        self.side: bool | None = None
        self.team: str | None = None
        self.message = False
        """A user or assistant message of the main conversation was seen."""
        self.side_message = False
        """A sidechain (subagent) user or assistant message was seen: a file
        with these and no main message is a subagent's transcript, whatever its
        first line (Claude Code's picker does not list it either)."""
        self.entries = 0
        self.forked_from: str | None = None

    def envelope(self, e: Head) -> None:
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
        if self.forked_from is None:
            self.forked_from = forked_from(e.forkedFrom)

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
_MEDIA: Final = ((b'"type":"image"', "Image"), (b'"type":"document"', "Document"))


def _media(line: bytes) -> str | None:
    """What the picker names a user line that carries an image or a document."""
    if b'"tool_result"' in line:
        return None
    for needle, name in _MEDIA:
        if needle in line:
            return name
    return None


def scan_head(head: bytes, end: int, st: HeadState) -> None:
    """Decode the complete lines of ``head[:end]`` in order until the first
    prompt and a message of the main conversation are known, or until the
    first line shows a sidechain or an entry a team transcript.

    The FIRST line says whether the file is a subagent's (``"isSidechain":true``
    there); a sidechain user entry further down (1.0.x wrote Task prompts
    inline) is a prompt like any other, but only a main message makes the file
    a session: one whose messages are all sidechains is a subagent's
    transcript behind a metadata line (``side_message``).
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
        first = st.side is None
        if first:
            st.side = False
        if startswith(_NO_HEAD_FIELDS, pos):
            st.entries += 1
            pos = stop + 1
            continue
        if ready:
            peek = min(stop, pos + _PEEK)
            if find(_NOT_A_PROMPT[0], pos, peek) >= 0 or find(_NOT_A_PROMPT[1], pos, peek) >= 0:
                pos = stop + 1
                continue
        line_start = pos
        e = decode_line(_head_dec, Head, head[pos:stop])
        pos = stop + 1
        if e is None:
            continue
        st.entries += 1
        if first:
            st.side = bool(e.isSidechain)
        st.envelope(e)
        if st.side or st.team:
            return
        if e.type in MATERIALIZING_TYPES:
            if e.isSidechain:
                st.side_message = True
            else:
                st.message = True
                ready = bool(st.cwd and st.created_at)
        if st.prompt is not None:  # the prompt was a sidechain's: a main message is still sought
            if st.message:
                return
            continue
        if e.type != "user" or e.isMeta or e.isCompactSummary:
            continue
        if st.media is None:
            st.media = _media(head[line_start:stop])
        for raw in message_texts(e.message) or ():
            st.offer(classify_text(raw))
            if st.prompt is not None:
                break
        if st.prompt is not None and st.message:
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
    body = _STR_BODY.match(buf, start, limit)
    assert body is not None  # the pattern matches the empty string too
    end = body.end()
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


def salvage(seg: bytes, st: HeadState) -> None:
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
    if sidechain:
        st.side_message = True
    else:
        st.message = True
    if _TRUE[b"isMeta"].search(before) or _TRUE[b"isCompactSummary"].search(before):
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


def probe_tail(buf: bytes, start: int, end: int, st: HeadState) -> None:
    """The head showed no message, or no envelope (a huge first prompt cut before
    its cwd): take both from the newest user/assistant entry of the tail."""
    for line in reversed(buf[start:end].split(b"\n")):
        if b'"user"' not in line and b'"assistant"' not in line:
            continue
        e = decode_line(_head_dec, Head, line)
        if e is None or e.type not in MATERIALIZING_TYPES:
            continue
        st.entries += 1
        if st.side is None:
            st.side = bool(e.isSidechain)
        if e.teamName:
            st.team = e.teamName
        if e.isSidechain:
            st.side_message = True
        else:
            st.message = True
            st.cwd = st.cwd or e.cwd
            st.branch = st.branch or e.gitBranch or None
            st.sid = st.sid or e.sessionId
            return
