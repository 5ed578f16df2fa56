"""The TypeScript client (client/node) and its SessionStore, tested by Node's
own test runner against real daemons it starts (with this interpreter's
sessiond): the wire client, and the Agent SDK's 14 store contracts. ``make
test`` builds it first (``make node``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "client" / "node"

pytestmark = pytest.mark.timeout(240)


def test_node_client() -> None:
    node = shutil.which("node")
    assert node is not None, "node is not installed (.ci/run installs it)"
    built = sorted((PACKAGE / "dist" / "test").glob("*.test.js"))
    assert built, f"the TypeScript client is not built: run `make node` ({PACKAGE / 'dist'} has no tests)"
    env = {**os.environ, "SESSIOND_PYTHON": sys.executable}
    run = subprocess.run([node, "--test", *map(str, built)], cwd=PACKAGE, env=env, capture_output=True, text=True,
                         timeout=200)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-6000:]
    counts = dict(re.findall(r"^# (tests|pass|fail|skipped|todo|cancelled) (\d+)$", run.stdout, re.M))
    assert counts.get("fail") == "0" and counts.get("skipped") == "0" and counts.get("cancelled") == "0", report[-6000:]
    assert int(counts["pass"]) == int(counts["tests"]) >= 15, counts
