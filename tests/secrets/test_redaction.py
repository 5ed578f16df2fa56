"""``store.redaction`` on real files: lines a writer that takes no lock (Claude
Code appending to its own file, each append opening the path) adds while a
session is being rewritten are all in the redacted copy afterwards, redacted."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from sessiond.store.paths import project_dir
from sessiond.store.redaction import redact_session
from tests.secrets.fakes import fakes

CWD = "/work/live"


@pytest.mark.timeout(120)
def test_lines_appended_during_the_rewrite_are_carried_over(short_tmp):
    root = short_tmp / "root"
    sid = str(uuid.uuid4())
    path = project_dir(root, CWD) / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    token = fakes(5)[3].value
    filler = "x" * 2000

    def entry(n: int) -> bytes:
        return json.dumps({"type": "user", "uuid": str(uuid.UUID(int=n)), "sessionId": sid,
                           "message": {"role": "user", "content": f"line {n} GITHUB_TOKEN={token} {filler}"}}).encode() + b"\n"

    with open(path, "wb") as f:
        f.writelines(entry(n) for n in range(2000))  # 4 MB: the copy takes a while
    written = [2000]
    stop = threading.Event()

    def writer() -> None:  # as Claude Code appends: open the path, append one whole line, close; often
        while not stop.wait(0.002):
            with open(path, "ab") as f:
                f.write(entry(written[0]))
            written[0] += 1

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.05)
    try:
        done = redact_session(root, path)
    finally:
        stop.set()
        t.join(timeout=60)
    lines = path.read_bytes().splitlines()
    numbers = [int(json.loads(x)["message"]["content"].split()[1]) for x in lines]
    # every line once (none left behind in the trashed original), in order but
    # for the few that landed in the instant between the last catch-up and the rename
    assert sorted(numbers) == list(range(written[0]))
    assert sum(1 for a, b in zip(numbers, numbers[1:]) if b < a) <= 1
    assert done.entry is not None
    original = root / ".trash" / done.entry / "files" / path.relative_to(root)
    before = len(original.read_bytes().splitlines())  # what the writer put in the original, during the copy too
    assert before > 2000 and done.secrets == before
    assert [n for n, x in zip(numbers, lines) if n < before and token.encode() in x] == []
