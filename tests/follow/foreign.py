"""The stand-in Claude Code process (``foreign_writer.py``) driven from a test:
each ``do`` is one operation, done and answered before it returns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import CORPUS

WRITER = Path(__file__).with_name("foreign_writer.py")


class Foreign:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WRITER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def do(self, op: str, path: Path, **kw) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, "path": str(path), **kw}) + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()

    def __enter__(self) -> Foreign:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def corpus_lines(n: int, skip: int = 0) -> list[str]:
    """``n`` real Claude Code lines (with their newlines) of the corpus."""
    out: list[str] = []
    for f in sorted(CORPUS.glob("*.jsonl")):
        out += [x + "\n" for x in f.read_text().splitlines() if x.strip()]
        if len(out) >= n + skip:
            return out[skip:skip + n]
    raise AssertionError(f"the corpus has fewer than {n + skip} lines")
