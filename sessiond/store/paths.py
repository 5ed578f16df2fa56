"""Where Claude Code (and so sessiond) keeps each transcript, and which ids are legal.

Layout under the store root (SPEC 2)::

    projects/<sanitized-cwd>/<session-id>.jsonl
    projects/<sanitized-cwd>/<session-id>/subagents/[workflows/<run>/]agent-<id>.jsonl

Sanitizing must match Claude Code's JavaScript byte for byte, because pointing the
root at ``~/.claude`` must land on the very files Claude Code writes: JS regexes see
UTF-16 code units, so a character outside the BMP becomes two dashes, and long names
get a djb2 hash computed over UTF-16 code units of the original name.
"""

from __future__ import annotations

import os
import re
import sys
import unicodedata
from array import array
from pathlib import Path

from sessiond.wire.core import PROJECT_NAME
from sessiond.wire.errors import SessiondError, bad_request, permission_denied

MAX_SANITIZED = 200
PATH_MAX = 4096
"""The longest cwd accepted, in UTF-8 bytes (Linux's PATH_MAX): nothing longer
can be a working directory, and realpath's cost grows with the square of the
depth."""

_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")
_NOT_ALNUM = re.compile("[^A-Za-z0-9]")
PROJECT_RE = re.compile(PROJECT_NAME)
"""Project dir names as Claude Code sanitizes them (alphanumerics and dashes)."""


def utf16_units(text: str) -> array[int]:
    """The UTF-16 code units of ``text``, as JavaScript's ``charCodeAt`` sees them."""
    units = array("H", text.encode("utf-16-le", "surrogatepass"))
    if sys.byteorder == "big":  # pragma: no cover - the array reads native order
        units.byteswap()
    return units


def djb2(text: str) -> int:
    """``h = (h*31 + unit) | 0`` over UTF-16 code units: a signed 32-bit result."""
    h = 0
    for unit in utf16_units(text):
        h = (h * 31 + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    if n == 0:
        return "0"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(digits[r])
    return "".join(reversed(out))


def sanitize(name: str) -> str:
    """Claude Code's project-directory name for ``name`` (usually a cwd):
    ``name.replace(/[^a-zA-Z0-9]/g, "-")`` over UTF-16 code units, so a
    character outside the BMP (two units) becomes two dashes. Two regex passes,
    linear in the length."""
    sanitized = _NOT_ALNUM.sub("-", _ASTRAL.sub("--", name))
    if len(sanitized) <= MAX_SANITIZED:
        return sanitized
    return f"{sanitized[:MAX_SANITIZED]}-{base36(abs(djb2(name)))}"


def canonical_cwd(cwd: str) -> str:
    """realpath + Unicode NFC, after refusing what can never be a working directory."""
    check_cwd(cwd)
    return unicodedata.normalize("NFC", os.path.realpath(cwd))


def check_cwd(cwd: str) -> None:
    if not isinstance(cwd, str) or not cwd:
        raise bad_request("cwd is required")
    if len(cwd) > PATH_MAX or len(cwd.encode("utf-8", "surrogatepass")) > PATH_MAX:
        raise bad_request(f"cwd is longer than {PATH_MAX} bytes (PATH_MAX)")
    if "\x00" in cwd:
        raise bad_request("cwd contains a NUL byte")
    if not os.path.isabs(cwd):
        raise bad_request(f"cwd must be an absolute path: {cwd!r}")


def check_session_id(session_id: str) -> str:
    """The canonical form of a session id (lower-case, no braces), or ``bad_request``.

    Every side (daemon, fallback, readers, CLI) keys files and sessions by what
    this returns, so ``ABC…``, ``{abc…}`` and ``abc…`` are one session and one
    file, never two transcripts side by side."""
    if isinstance(session_id, str):
        core = session_id[1:-1] if session_id[:1] == "{" and session_id[-1:] == "}" else session_id
        if _UUID_RE.fullmatch(core):
            return core.lower()
    raise bad_request(f"session id must be a UUID: {session_id!r}")


def check_id(kind: str, value: str) -> str:
    """Agent, run and task ids: ``[A-Za-z0-9_-]{1,128}``, nothing else (no traversal)."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        raise bad_request(f"{kind} id must match [A-Za-z0-9_-]{{1,128}}: {value!r}")
    return value


def is_session_id(value: str) -> bool:
    """Whether ``check_session_id`` accepts ``value`` (any case, braces or not)."""
    try:
        check_session_id(value)
    except SessiondError:
        return False
    return True


def projects_dir(root: Path) -> Path:
    return root / "projects"


def project_dir(root: Path, cwd: str) -> Path:
    return projects_dir(root) / sanitize(canonical_cwd(cwd))


def session_file(project: Path, session_id: str) -> Path:
    return project / f"{check_session_id(session_id)}.jsonl"


def subagents_dir(project: Path, session_id: str, run: str | None = None) -> Path:
    base = project / check_session_id(session_id) / "subagents"
    return base / "workflows" / check_id("run", run) if run is not None else base


def agent_file(project: Path, session_id: str, agent: str, run: str | None = None) -> Path:
    return subagents_dir(project, session_id, run) / f"agent-{check_id('agent', agent)}.jsonl"


def agent_meta_file(project: Path, session_id: str, agent: str, run: str | None = None) -> Path:
    return subagents_dir(project, session_id, run) / f"agent-{check_id('agent', agent)}.meta.json"


def remote_agent_meta_file(project: Path, session_id: str, task: str) -> Path:
    name = f"remote-agent-{check_id('task', task)}.meta.json"
    return project / check_session_id(session_id) / "remote-agents" / name


def check_inside(root: Path, path: Path) -> Path:
    """Refuse a path that resolves outside ``root`` (a symlink planted inside the
    store pointing elsewhere): the daemon never reads or writes outside its root."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise permission_denied(f"{path} resolves outside the store root")
    return path
