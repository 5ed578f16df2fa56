"""What counts as a person's prompt in a user entry's text (SPEC 5).

Why its own module: the rules (Claude Code's picker's: slash commands
remembered by name but not taken as the first prompt, machinery in tags
skipped, ``!`` for bash input, one line cut at 200 characters as Claude Code
writes ``lastPrompt``) are shared by the lite
read's first prompt and by search, which ranks prompts apart from other text;
they change when Claude Code's markup changes, not when the windows do.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

PROMPT_MAX: Final = 200
"""Prompts are shown on one line, cut at 200 characters plus an ellipsis, as
Claude Code writes ``lastPrompt`` — so firstPrompt and lastPrompt look alike."""

_COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>")
_BASH_INPUT = re.compile(r"<bash-input>([\s\S]*?)</bash-input>")
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

    The rules are those of Claude Code's picker as it shows them (2.1.197 and
    the SDK's bundled 2.1.3xx agree, ``tests/e2e/test_claude_picker.py``): a
    text holding ``<command-name>`` anywhere is a slash command, not the first
    prompt, but the first one is remembered as typed, name and arguments (a
    session that only ran ``/init`` is shown as ``/init``, one that ran
    ``/erk:plan-implement 8491`` as that; the SDK's ``list_sessions`` keeps the
    name alone, the picker does not); bash-mode input is ``! cmd``; tag-led
    text and interrupt markers are machinery.
    """
    text = raw.replace("\n", " ").strip()
    if not text:
        return None
    name = _COMMAND_NAME.search(text)
    if name is not None:
        if not name.group(1):
            return None
        args = _COMMAND_ARGS.search(text)
        return "command", f"{name.group(1)} {args.group(1).strip()}".strip() if args else name.group(1)
    bash = _BASH_INPUT.search(text)
    if bash:
        return ("prompt", "! " + bash.group(1).strip())
    if _SKIP.match(text):
        return None
    return ("prompt", text)


# A typed partial decode of a user message: only block types and texts.


class _Block(msgspec.Struct):
    type: str | None = None
    text: str | None = None


class _Message(msgspec.Struct):
    content: str | list[_Block] | None = None


_msg_dec = msgspec.json.Decoder(_Message)


def message_texts(raw: msgspec.Raw) -> list[str] | None:
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
