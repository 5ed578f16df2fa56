"""``[mirror] redact = true``: other machines get every line with its secrets
masked, the same length (the stream is byte ranges at the files' offsets), the
ids and signatures as written; the local files stay as written, and a daemon
restarted on a redacted stream takes it up where it was."""

from __future__ import annotations

import json
import uuid

from sessiond.wire import messages as m
from tests.helpers import assistant, line, user
from tests.secrets.fakes import fakes

from .conftest import tree, wait_mirrored


def _entries(token: str, stripe: str) -> list[dict]:
    sig = "EqQBCkYIBxgCKkB" + "s" * 60
    first = user(f"deploy with GITHUB_TOKEN={token}")
    second = {**assistant(""), "parentUuid": first["uuid"], "message": {"role": "assistant", "id": "msg_1", "content": [
        {"type": "thinking", "thinking": "a token was pasted", "signature": sig},
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cat .env"}}]}}
    third = user("", parentUuid=second["uuid"], message={"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": f"DEBUG=1\nSTRIPE_SECRET_KEY={stripe}\n"}]})
    return [first, second, third]


def test_redacted_mirror_sends_masked_lines_of_the_same_length(daemon_factory, mirror_config, short_tmp):
    cfg = mirror_config(redact=True)
    env = {"SESSIOND_CONFIG": str(cfg)}
    a = daemon_factory(name="a").start("--config", str(cfg))
    b = daemon_factory(name="b")
    f = fakes(21)
    token, stripe = f[3].value, f[12].value
    cwd, sid = str(short_tmp), str(uuid.uuid4())
    with a.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(e) for e in _entries(token, stripe)],
                        durability="written"))
    wait_mirrored(a)
    b.cli("pull", sid, env=env)
    local, remote = tree(a.root), tree(b.root)
    assert local.keys() == remote.keys()
    (name,) = local
    assert token.encode() in local[name] and stripe.encode() in local[name]  # the local file as written
    assert token.encode() not in remote[name] and stripe.encode() not in remote[name]
    assert b"[REDACTED:github-token:" in remote[name] and b"[REDACTED:stripe-secret-key:" in remote[name]
    mine, theirs = local[name].splitlines(), remote[name].splitlines()
    assert [len(x) for x in mine] == [len(x) for x in theirs]  # every offset holds
    for x, y in zip(mine, theirs, strict=True):
        ex, ey = json.loads(x), json.loads(y)
        assert (ex["uuid"], ex.get("parentUuid")) == (ey["uuid"], ey.get("parentUuid"))
    assert json.loads(mine[1])["message"]["content"][0] == json.loads(theirs[1])["message"]["content"][0]  # signature

    # A restart resolves each file against the stream's masked copy (not "differs"), then goes on.
    a.stop()
    a.start("--config", str(cfg))
    more = user(f"and again {token}", parentUuid=json.loads(mine[-1])["uuid"])
    with a.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(more)], durability="written"))
    st = wait_mirrored(a)
    assert st["diverged"] in (0, [], None) and st["errors"] == 0, st
    b.cli("pull", sid, env=env)
    remote = tree(b.root)[name]
    assert len(remote) == len(tree(a.root)[name]) and token.encode() not in remote
    assert json.loads(remote.splitlines()[-1])["uuid"] == more["uuid"]
