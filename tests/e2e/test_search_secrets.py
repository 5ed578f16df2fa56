"""The search index never stores a secret's text: searching for a key finds
nothing, the rest of its line is still found (through the daemon's index and
through the offline scan of the files), and the marker's fingerprint finds
the sessions that mention one secret."""

from __future__ import annotations

import json
import uuid

from sessiond.secrets import fingerprint
from sessiond.wire import messages as m
from tests.helpers import assistant, line, user
from tests.secrets.fakes import fakes

CWD = "/work/searched"


def search(d, *args: str) -> list[dict]:
    return json.loads(d.cli("search", *args, "--cwd", CWD, "--json", check=False).stdout)  # none: exit 1


def test_a_key_is_not_found_the_rest_of_its_line_is(fresh_config, daemon_factory):
    d = daemon_factory().start()
    fake = fakes(11)
    token, aws = fake[3].value, fake[2].value
    sid = str(uuid.uuid4())
    result = {"type": "tool_result", "tool_use_id": "toolu_1",
              "content": f"loaded heliotrope settings\nGITHUB_TOKEN={token}\nAWS_SECRET_ACCESS_KEY={aws}\n"}
    entries = [user(f"the quokka token is {token}"),
               {**assistant(""), "message": {"role": "assistant", "content": [
                   {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cat .env", "api_key": aws}}]}},
               user("", message={"role": "user", "content": [result]})]
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=CWD, durability="written", entries=[line(e) for e in entries]))
    assert search(d, token) == [] and search(d, aws) == []
    assert search(d, token[4:]) == []  # not even the part after the prefix
    found = search(d, "quokka")
    assert len(found) == 1 and token not in json.dumps(found)
    assert search(d, "heliotrope") and token not in json.dumps(search(d, "heliotrope"))
    assert [h["sessionId"] for h in search(d, fingerprint(token))] == [sid]  # the marker's fingerprint is searchable
    d.stop()  # and the same from the files, with no index to read
    (d.root / "index.sqlite").unlink(missing_ok=True)
    for path in d.root.rglob("*.sqlite*"):
        path.unlink()
    offline = d.cli("--no-autostart", "search", "quokka", "--cwd", CWD, "--json")
    assert b"scanned the files" in offline.stderr and len(json.loads(offline.stdout)) == 1
    assert token not in offline.stdout.decode()  # the title it shows (the prompt with the key) included
    assert json.loads(d.cli("--no-autostart", "search", token, "--cwd", CWD, "--json", check=False).stdout) == []


def test_a_key_across_the_index_cut_is_not_indexed_in_part():
    """A tool result is indexed up to ``TOOL_TEXT_MAX`` characters: a key that
    the cut would halve is still recognized whole, and none of it is indexed."""
    from sessiond.search.extract import TOOL_TEXT_MAX, extract

    token = fakes(12)[3].value
    for before in (TOOL_TEXT_MAX - 20, TOOL_TEXT_MAX - 4, TOOL_TEXT_MAX - 40):
        text = "a" * before + " " + token + " tail"
        got = extract(line(user("", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": text}]})))
        indexed = " ".join(d.text for d in got.docs)
        assert token[:6] not in indexed and token[4:10] not in indexed and indexed.startswith("a" * 100)
