"""What Claude Code's own ``--resume`` picker shows, read off a real terminal.

Why: sessiond names a session with the title Claude Code's picker shows, and
the only authority on that is the picker itself. A real ``claude`` binary is
run interactively in tmux, offline (a dummy API key already approved, the
onboarding and trust dialogs already accepted, the API at a local port where
nothing listens: the picker needs no network), on a config dir laid out from
corpus transcripts; the pane is captured and each row's title is read with its
size, which names the file it stands for. ``tests/e2e/test_claude_picker.py``
compares it with ``sessiond list --json``; ``bench/picker_titles.py`` prints
the table for both Claude Code releases.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from sessiond.store.paths import sanitize

CORPUS = Path(__file__).parent / "corpus" / "claude-code"

OLD_RELEASE = "2.1.197"
"""The npm ``@anthropic-ai/claude-code`` release compared with the wheel's newer one."""

API_KEY = "sk-ant-api03-picker-test-dummy-key-0000000000"
"""A key no server ever sees (the picker makes no request); approved in the
config so the "use this API key?" dialog does not come up."""

OFFLINE = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9",  # nothing listens there: any request fails at once
           "ANTHROPIC_API_KEY": API_KEY, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"}


@dataclass(frozen=True)
class Case:
    """One corpus transcript placed in the project, and the title rule it exercises."""

    corpus: str
    rule: str
    picker_lists: bool = True  # whether Claude Code's picker shows it
    sessiond_lists: bool = True  # whether ``sessiond list`` shows it
    summary_from: str | None = None  # a corpus file whose summary lines are appended (no file has both kinds)

    @property
    def session(self) -> str:
        """The file's name in the project dir (a stable uuid: Entire copies are all ``full.jsonl``)."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, self.corpus))

    def content(self) -> bytes:
        """The bytes placed: the corpus file's, and ``summary_from``'s summary lines after them."""
        data = (CORPUS / self.corpus).read_bytes()
        if self.summary_from is not None:
            lines = (CORPUS / self.summary_from).read_bytes().splitlines(keepends=True)
            data += b"".join(line for line in lines if line.startswith(b'{"type":"summary"'))
        return data

    @property
    def size(self) -> int:
        return len(self.content())


CASES = (
    Case("entireio__external-agents__24-4c84dd9136-0-full.jsonl", "custom title (also last-prompt)"),
    Case("blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full.jsonl", "AI title (also last-prompt)"),
    Case("daaain__claude-code-log__ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl", "last-prompt, not the first prompt"),
    Case("kfischer-okarin__scripts-and-tools__b3edadab-bca0-4054-9b41-f7ffa6941260.jsonl", "summary, not the first prompt"),
    Case("daaain__claude-code-log__3680252d-d4e3-4416-bddd-8f5b5b4fdb7f.jsonl", "summary over a /model first prompt"),
    # A 2.1 session (last-prompt) given a 2.0 summary, as one resumed across versions would hold both.
    Case("entireio__external-agents__24-44cdc4a359-0-full.jsonl", "last-prompt and a summary",
         summary_from="kfischer-okarin__scripts-and-tools__b3edadab-bca0-4054-9b41-f7ffa6941260.jsonl"),
    Case("daaain__claude-code-log__fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl",
         "summaries only in the head, beyond the tail window"),
    Case("daaain__claude-code-log__03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl", "first prompt only"),
    Case("d-kimuson__claude-code-viewer__1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl", "built-in /init first prompt"),
    Case("dagster-io__erk__8425536d-8181-4524-9ea2-c2148a31dcb0.jsonl", "custom slash command with args first"),
    Case("daaain__claude-code-log__agent-a4ca7529859c158c2.jsonl", "sidechain head (a subagent)", picker_lists=False,
         sessiond_lists=False),
    Case("kfischer-okarin__scripts-and-tools__be89c3cd-bfbf-4c4f-a515-5af6e13249bf.jsonl", "summary only, no message",
         sessiond_lists=False),
)


def layout(config: Path, work: Path, cases: tuple[Case, ...] = CASES) -> Path:
    """A Claude Code config dir ``config`` in which ``work`` is a trusted,
    onboarded project whose sessions are ``cases`` (copies, mtimes an hour
    apart in ``cases``' order, the first newest); returns the project dir."""
    project = config / "projects" / sanitize(str(work))
    project.mkdir(parents=True)
    now = time.time()
    for i, case in enumerate(cases):
        dest = project / f"{case.session}.jsonl"
        dest.write_bytes(case.content())
        os.utime(dest, (now - 3600 * (i + 1), now - 3600 * (i + 1)))
    state = {"hasCompletedOnboarding": True, "theme": "dark", "numStartups": 3,
             "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
             "projects": {str(work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True,
                                      "allowedTools": []}}}
    (config / ".claude.json").write_text(json.dumps(state))
    return project


@dataclass(frozen=True)
class Row:
    """One session as the picker shows it: its (maybe cut) title and its size label."""

    title: str
    size: str  # "310.5KB", "378 bytes"

    @property
    def bytes(self) -> float:
        number, unit = re.fullmatch(r"([\d.]+) ?(bytes|KB|MB|GB)", self.size).groups()  # type: ignore[union-attr]
        return float(number) * {"bytes": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}[unit]


SIZE = re.compile(r"· ([\d.]+(?: bytes|KB|MB|GB))\s*$")
"""A row's second line ends with the file size: "3 seconds ago · main · 1.9KB"."""


MARKS = "❯↑↓ "
"""What the picker puts before a title: the cursor, and the arrows saying more rows are above or below."""


def rows(screen: str) -> list[Row]:
    """The session rows of a captured picker, top to bottom: each title is
    the last non-blank line above a line ending in the size, less its marks."""
    lines = screen.splitlines()
    found = []
    for i, text in enumerate(lines):
        m = SIZE.search(text)
        if m is None or " ago" not in text and "just now" not in text:
            continue
        above = next(t for t in reversed(lines[:i]) if t.strip())
        found.append(Row(above.strip().lstrip(MARKS).strip(), m.group(1)))
    return found


def file_of(row: Row, cases: tuple[Case, ...] = CASES) -> Case:
    """The case whose size the row's label shows (sizes in ``CASES`` are far apart)."""
    best = min(cases, key=lambda c: abs(c.size - row.bytes))
    assert abs(best.size - row.bytes) <= max(0.06 * 1024, row.bytes * 0.001), (row, best)
    return best


def shows(shown: str, title: str) -> bool:
    """Whether the picker's ``shown`` (cut with "…" when too long, whitespace
    folded) is ``title``."""
    full = " ".join(title.split())
    if shown.endswith("…"):
        return full.startswith(shown[:-1].rstrip())
    return shown == full


class Picker:
    """``claude --resume`` running in a private tmux server (its socket at
    ``socket``, the server killed on ``close``), a wide window so titles are
    cut late, of a common terminal's height, so that reading every row takes
    paging down."""

    def __init__(self, claude: Path, work: Path, config: Path, home: Path, socket: Path, width: int = 240,
                 height: int = 24) -> None:
        tmux = shutil.which("tmux")
        assert tmux is not None, "tmux is not installed (.ci/run installs it)"
        self.tmux = [tmux, "-S", str(socket), "-f", "/dev/null"]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TERM": "xterm-256color",
               "LANG": "C.UTF-8", "CLAUDE_CONFIG_DIR": str(config), **OFFLINE}
        command = "env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        command += f" {shlex.quote(str(claude))} --resume; echo CLAUDE-EXITED $?; sleep 600"
        subprocess.run([*self.tmux, "new-session", "-d", "-s", "p", "-x", str(width), "-y", str(height),
                        "-c", str(work), command], check=True, timeout=30)

    def capture(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", "p"], capture_output=True, text=True,
                              check=True, timeout=30).stdout

    def key(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "p", *keys], check=True, timeout=30)

    def settled(self, timeout: float = 60.0) -> str:
        """The pane once the picker shows rows and two captures a moment apart agree."""
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            screen = self.capture()
            if "CLAUDE-EXITED" in screen:
                raise AssertionError(f"claude exited instead of showing the picker:\n{screen}")
            if rows(screen) and screen == last:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"the picker did not show sessions in {timeout}s:\n{screen}")
            last = screen
            time.sleep(0.5)

    def all_rows(self, expected: int, timeout: float = 60.0) -> tuple[list[Row], str]:
        """Every row, paging down while fewer than ``expected`` distinct ones
        were seen (a bounded number of pages); and the first screen."""
        first = self.settled(timeout)
        seen = {r.size: r for r in rows(first)}
        order = list(seen.values())
        for _ in range(10):
            if len(seen) >= expected:
                break
            self.key("PageDown")
            for r in rows(self.settled(timeout)):
                if r.size not in seen:
                    seen[r.size] = r
                    order.append(r)
        return order, first

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True, timeout=30)


def picker_titles(claude: Path, base: Path, cases: tuple[Case, ...] = CASES) -> tuple[dict[str, str], str]:
    """``{session: title shown}`` for ``cases`` laid out under ``base`` (made
    here: ``config``, ``work``, ``home``), top row first, and the first screen captured."""
    config, work, home = base / "config", base / "work", base / "home"
    for d in (work, home):
        d.mkdir(parents=True)
    work = work.resolve()
    layout(config, work, cases)
    picker = Picker(claude, work, config, home, base / "tmux")
    try:
        found, screen = picker.all_rows(sum(c.picker_lists for c in cases))
    finally:
        picker.close()
    return {file_of(r, cases).session: r.title for r in found}, screen
