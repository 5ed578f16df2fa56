"""The search index learns of foreign writes from the follower, not only from
the re-stat a search runs: with that re-stat an hour apart, a line Claude Code
appends is still found, and a half line only once its newline arrives."""

from __future__ import annotations

import json
import uuid

from sessiond.store.paths import project_dir
from tests.helpers import assistant, line, user, wait_until

CWD = "/work/followed"


def search(d, word: str) -> list[str]:
    return [h["sessionId"] for h in json.loads(d.cli("search", word, "--cwd", CWD, "--json", check=False).stdout)]


def test_foreign_lines_reach_the_index_through_the_follower(short_tmp, monkeypatch, daemon_factory):
    cfg = short_tmp / "config.toml"
    cfg.write_text("search_refresh_s = 3600\n")  # the search's own re-stat: once, at the first search
    monkeypatch.setenv("SESSIOND_CONFIG", str(cfg))
    d = daemon_factory().start()
    sid = str(uuid.uuid4())
    path = project_dir(d.root, CWD) / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(line(user("an opening about lemurs")) + b"\n")
    wait_until(lambda: search(d, "lemurs") == [sid], "the first session indexed", timeout=20)  # the first search's re-stat may find it too
    with open(path, "ab") as f:  # Claude Code appends; no search re-stat will run for an hour
        f.write(line(assistant("then a quokka")) + b"\n" + line(user("and a narwhal"))[:20])
    wait_until(lambda: search(d, "quokka") == [sid], "the foreign line indexed", timeout=20)
    assert search(d, "narwhal") == []  # half a line is not passed on
    with open(path, "ab") as f:
        f.write(line(user("and a narwhal"))[20:] + b"\n")
    wait_until(lambda: search(d, "narwhal") == [sid], "the completed line indexed", timeout=20)
