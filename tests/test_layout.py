"""The architecture holds: every module imports on its own (no import-order
cycles), protocol/ imports neither the daemon, the client nor common/, common/
imports neither the daemon nor the client, and the client imports the daemon
only to run it (``serve``)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

PACKAGES = {"protocol": "sessiond.protocol", "daemon": "sessiond.daemon", "client": "sessiond.client",
            "common": "sessiond.common"}


def modules() -> list[str]:
    out = []
    for folder, package in PACKAGES.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if parts and parts[-1] == "__main__":
                continue
            out.append(".".join([package, *parts]))
    return out


@pytest.mark.timeout(300)
def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module imported with none of sessiond's loaded before it: the first
    import of a module is the one that cycles. One interpreter serves them all,
    forgetting every ``sessiond`` module between two (third-party modules stay
    loaded: they are no part of our import order), which is what a fresh
    interpreter per module gave, in one start instead of 150."""
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    for loaded in [m for m in sys.modules if m == 'sessiond' or m.startswith('sessiond.')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except BaseException as exc:\n"
        "        print(f'{name}: {type(exc).__name__}: {exc}')\n"
    )
    r = subprocess.run([sys.executable, "-c", code, *modules()], capture_output=True, timeout=240, text=True)
    assert r.returncode == 0 and not r.stdout, r.stdout + r.stderr


def importers(folder: str, packages: str) -> dict[str, list[str]]:
    """Files of ``folder`` that import one of ``packages`` (a regex alternative),
    absolutely or relatively, each with the lines that do."""
    pattern = re.compile(rf"^\s*(?:from|import)\s+(?:sessiond\.(?:{packages})|\.\.+(?:{packages}))\b.*$", re.M)
    found = {}
    for path in (REPO / folder).rglob("*.py"):
        lines = [m.group(0).strip() for m in pattern.finditer(path.read_text())]
        if lines:
            found[str(path.relative_to(REPO))] = lines
    return found


def test_protocol_imports_neither_daemon_nor_client_nor_common():
    assert importers("protocol", "daemon|client|common") == {}


def test_common_imports_neither_daemon_nor_client():
    assert importers("common", "daemon|client") == {}


def test_client_imports_the_daemon_only_to_serve():
    """The CLI's ``serve`` runs the daemon in-process; nothing else in the client
    may reach into it (shared pieces live in common/ or protocol/)."""
    assert importers("client", "daemon") == {"client/cli/daemon_cmds.py": ["from sessiond.daemon.server import serve as run"]}


def test_tests_and_benches_read_nothing_outside_the_repository():
    """A fresh clone has nothing beside it: the real transcripts the tests use
    live in tests/corpus (with their SOURCES.md), never in the folder beside it."""
    word = "sha" + "red"  # spelled apart so this file does not match itself
    pattern = re.compile(rf"""\.\./{word}|["']{word}["']|parent\s*/\s*["']{word}""")
    files = [*(REPO / "tests").rglob("*.py"), *(REPO / "bench").rglob("*.py"), REPO / "Makefile", REPO / ".ci" / "run"]
    offenders = [str(p.relative_to(REPO)) for p in files if pattern.search(p.read_text())]
    assert offenders == []
    from tests.conftest import CORPUS

    assert CORPUS.is_relative_to(REPO) and len(list(CORPUS.glob("*.jsonl"))) >= 40
    assert (CORPUS.parent / "SOURCES.md").is_file()


def test_every_package_is_in_the_distribution():
    """A regular (non-editable) install ships only the packages pyproject.toml
    lists: a package folder missing there (the follower's was) installs a
    daemon that cannot start."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join([package, *init.parent.relative_to(REPO / folder).parts])
               for folder, package in PACKAGES.items() for init in (REPO / folder).rglob("__init__.py")}
    assert on_disk - listed == set(), "packages missing from pyproject.toml [tool.setuptools] packages"
