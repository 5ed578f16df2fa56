"""``sessiond secrets --engine kingfisher``: the optional larger engine (the
``secrets-extra`` extra, the ``kingfisher-secret-scanner`` wheel) lists what
its catalog finds beside the built-in kinds, through the real CLI on a real
file, never a value, never in a signature or an id; without the wheel the
option fails in one line saying how to get it."""

from __future__ import annotations

import json
import random
import string

import pytest

from sessiond.secrets import fingerprint
from sessiond.secrets.kingfisher import INSTALL, available
from tests.helpers import line, user
from tests.secrets.fakes import fakes

INSTALLED = available()
NEEDS_WHEEL = pytest.mark.skipif(not INSTALLED, reason=f"the kingfisher-secret-scanner wheel is not installed ({INSTALL})")


def _outside_the_builtin_kinds() -> tuple[str, str]:
    """A SendGrid key and a DigitalOcean token: formats the built-in rules do not know."""
    rng = random.Random(11)
    alnum = string.ascii_letters + string.digits
    return ("SG" + "." + "".join(rng.choice(alnum) for _ in range(22)) + "." + "".join(rng.choice(alnum) for _ in range(43)),
            "dop" + "_v1_" + "".join(rng.choice("0123456789abcdef") for _ in range(64)))


def _transcript(tmp_path):
    sendgrid, digitalocean = _outside_the_builtin_kinds()
    github = fakes(5)[3].value
    entries = [
        user(f"the old one was {github}"),
        user("", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": f"$ cat .env\nMAIL={sendgrid}\nDO={digitalocean}\n"}]}),
        user("", message={"role": "user", "content": [
            {"type": "thinking", "thinking": "a signature is never read", "signature": digitalocean}]}),
    ]
    path = tmp_path / "elsewhere.jsonl"
    path.write_bytes(b"\n".join(line(e) for e in entries) + b"\n")
    return path, github, sendgrid, digitalocean


@NEEDS_WHEEL
@pytest.mark.timeout(300)
def test_the_kingfisher_engine_lists_more_kinds_and_never_a_value(daemon_factory, tmp_path):
    d = daemon_factory().start()
    path, github, sendgrid, digitalocean = _transcript(tmp_path)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}  # the wheel's compiled-rule cache, not the user's
    builtin = d.cli("secrets", str(path), "--json", check=False, env=env)
    assert builtin.returncode == 1
    assert [(f["line"], f["kind"]) for f in json.loads(builtin.stdout)["findings"]] == [(1, "github-token")]
    r = d.cli("secrets", str(path), "--engine", "kingfisher", "--json", check=False, env=env, timeout=240)
    assert r.returncode == 1, r.stderr
    found = json.loads(r.stdout)["findings"]
    out = r.stdout.decode() + r.stderr.decode()
    assert github not in out and sendgrid not in out and digitalocean not in out
    assert (1, "github-token", fingerprint(github)) in {(f["line"], f["kind"], f["fingerprint"]) for f in found}
    assert [f for f in found if f["line"] == 1 and f["kind"] != "github-token"] == []  # both engines: reported once
    extra = {(f["line"], f["fingerprint"], f["field"]) for f in found if f["kind"].startswith("kingfisher:")}
    assert extra == {(2, fingerprint(sendgrid), "content"), (2, fingerprint(digitalocean), "content")}
    assert all(f["line"] != 3 for f in found)  # the same token in a signature: never read
    assert path.read_bytes().count(digitalocean.encode()) == 2  # read only


@pytest.mark.skipif(INSTALLED, reason="the kingfisher-secret-scanner wheel is installed here")
def test_without_the_wheel_the_engine_fails_in_one_line_saying_how_to_get_it(daemon_factory, tmp_path):
    d = daemon_factory().start()
    path, *_ = _transcript(tmp_path)
    r = d.cli("secrets", str(path), "--engine", "kingfisher", check=False)
    assert r.returncode not in (0, 1) and r.stdout == b""
    err = r.stderr.decode()
    assert INSTALL in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_redact_takes_the_builtin_rules_only(daemon_factory, tmp_path):
    d = daemon_factory().start()
    r = d.cli("secrets", "--redact", "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", "--engine", "kingfisher", check=False)
    assert r.returncode == 2 and b"--redact uses the built-in rules" in r.stderr and b"Traceback" not in r.stderr
