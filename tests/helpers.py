"""Small builders of transcript entries and readers of transcript files for tests."""

from __future__ import annotations

import json
import uuid as uuidlib
from pathlib import Path

from sessiond.protocol.transcript.paths import project_dir, session_file


def user(text: str, uid: str | None = None, **extra) -> dict:
    return {"type": "user", "message": {"role": "user", "content": text}, "uuid": uid or str(uuidlib.uuid4()), **extra}


def assistant(text: str, uid: str | None = None, **extra) -> dict:
    return {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}, "uuid": uid or str(uuidlib.uuid4()), **extra}


def line(entry: dict) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode()


def read_entries(path: Path) -> list[dict]:
    """Every line of a file parsed; fails the test on a torn or invalid line."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"{path} does not end with a newline"
    return [json.loads(l) for l in data.splitlines() if l]


def main_path(root: Path, cwd: str, session: str) -> Path:
    return session_file(project_dir(root, cwd), session)


def wait_until(condition, what: str, timeout: float = 15.0, every: float = 0.05) -> None:
    """Poll ``condition`` until it is true; fail naming ``what`` if it never is.
    A bound on a wait, not a timing assertion."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
