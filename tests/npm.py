"""Tools the tests compare against, installed from the npm registry into a
directory of the test session (ccusage, Claude Code 2.1.197): one helper, so
every such test skips for the same reason, said the same way, when npm or the
registry is not there."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def npm_install(spec: str, where: Path, timeout: float = 240) -> Path:
    """``node_modules`` of ``where`` after ``npm install spec`` into it (no
    lifecycle scripts run: npm leaves them to an allow list); the test is
    skipped, saying why, when npm is absent or the install fails (no registry)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed: cannot install {spec} to compare with")
    try:
        done = subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(where), spec],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install {spec} did not finish in {timeout:.0f}s (is the registry reachable?)")
    if done.returncode != 0:
        pytest.skip(f"could not install {spec} from the npm registry: {done.stderr.strip()[-300:]}")
    return where / "node_modules"
