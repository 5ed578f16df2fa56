"""The stand-in Claude Code process (``foreign_writer.py``) driven from a test
(each ``do`` is one operation, done and answered before it returns), and
what the follow tests read back: a watcher's frames, the follower's status."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

from sessiond.client.watch import subscribe
from sessiond.wire import messages as m
from tests.conftest import CORPUS
from tests.helpers import wait_until

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


def follow_status(d) -> dict[str, int]:
    with d.client() as c:
        return c.status().follow


def followed(d, path) -> None:
    """Wait until the follower itself passed on all of ``path`` (a watcher's own
    catch-up read does not say so), and the kernel's file clock moved past its
    last write: a same-size rewrite in that same tick keeps the times, which is
    the case docs/claude-code.md says is not noticed."""
    size = path.stat().st_size
    wait_until(lambda: (lambda f: f["bytes"] + f["known_bytes"])(follow_status(d)) >= size, "the follower to have the file")
    probe = path.parent.parent / "clock-probe"

    def ticked() -> bool:
        probe.write_bytes(b"x")
        return probe.stat().st_mtime_ns > path.stat().st_mtime_ns

    wait_until(ticked, "the file clock to move on")
    probe.unlink()


def middle_rewrite(text: list[str]) -> tuple[int, str]:
    """(offset, data): a same-size change inside the second line, far from both ends."""
    at = len(text[0].encode()) + 10
    return at, "Z" * 8


class Frames:
    """The Entries frames of one subscription, read on a thread (the stream blocks)."""

    def __init__(self, client, req: m.Subscribe) -> None:
        self.stream = subscribe(client, req)
        self.subscribed = next(self.stream)
        self.frames: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for frame in self.stream:
                self.frames.put(frame)
        except Exception as exc:  # the socket closed at the end of the test
            self.frames.put(exc)

    def until(self, *last: tuple[str, bytes], timeout: float = 20.0) -> list[m.Entries]:
        """Every frame up to those that carry each (file, line) of ``last``
        (files are read in no set order between them)."""
        got: list[m.Entries] = []
        waiting = set(last)
        while waiting:
            frame = self.frames.get(timeout=timeout)
            assert isinstance(frame, m.Entries), frame
            got.append(frame)
            waiting -= {(frame.file, x) for x in frame.lines}
        return got


def by_file(frames: list[m.Entries]) -> dict[str, list[bytes]]:
    """Each file's lines, checking that every frame starts where the one before ended."""
    lines: dict[str, list[bytes]] = {}
    ends: dict[str, int] = {}
    for f in frames:
        assert not f.reset, f
        if f.file in ends:
            assert f.offset == ends[f.file], (f.file, f.offset, ends[f.file])
        ends[f.file] = f.offset + sum(len(x) + 1 for x in f.lines)
        lines.setdefault(f.file, []).extend(f.lines)
    return lines


def raw(text: list[str]) -> list[bytes]:
    return [x.rstrip("\n").encode() for x in text]
