"""The architecture holds: every module imports on its own (no import-order
cycles), and each package of ``sessiond/`` imports only the packages below it
(the order in ``sessiond/__init__.py``); the client imports the daemon only to
run it (``serve``)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "sessiond"

BELOW = {
    "wire": set(),
    "secrets": set(),
    "store": {"wire", "secrets"},
    "search": {"wire", "secrets", "store"},
    "config_keys": {"wire", "secrets", "store"},
    "config": {"wire", "secrets", "store", "search", "config_keys"},
    "mirror": {"wire", "secrets", "store", "config", "config_keys"},
    "daemon": {"wire", "secrets", "store", "search", "config", "config_keys", "mirror"},
    "client": {"wire", "secrets", "store", "search", "config", "config_keys", "mirror"},
}
"""Each part of ``sessiond`` (a sub-package, or a top-level module) and the parts it may import."""


def module_name(path: Path) -> str:
    parts = [p for p in path.relative_to(REPO).with_suffix("").parts if p != "__init__"]
    return ".".join(parts)


def modules() -> list[str]:
    return [module_name(p) for p in sorted(PACKAGE.rglob("*.py")) if p.stem != "__main__"]


def part_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def imported(path: Path) -> list[tuple[str, int]]:
    """The ``sessiond`` modules a file imports (relative imports resolved), with their lines."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [target] if node.module or not node.level else [f"{target}.{a.name}" for a in node.names]
            if target == "sessiond":
                targets = [f"sessiond.{a.name}" for a in node.names]
            found += [(t, node.lineno) for t in targets if t.startswith("sessiond")]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("sessiond")]
    return found


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


def test_each_part_imports_only_the_parts_below_it():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        mine = part_of(module_name(path))
        for target, line in imported(path):
            theirs = part_of(target)
            if theirs is None or theirs == mine or target == "sessiond.__version__":
                continue
            if mine == "client" and target == "sessiond.daemon.server" and path.name == "daemon_cmds.py":
                continue  # ``serve`` runs the daemon in-process
            if theirs not in BELOW.get(mine or "", set()):
                offenders.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert offenders == []


def test_every_part_is_known_and_every_package_is_found():
    """Every part of ``sessiond`` has its place in ``BELOW``, and every folder of
    modules is a package (``__init__.py``): pyproject's package discovery ships
    only those, and a folder without one installs a daemon that cannot start."""
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if p.name != "__init__.py" and (p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__"))}
    assert parts == set(BELOW)
    folders = {p.parent for p in PACKAGE.rglob("*.py")}
    assert [str(f) for f in folders if not (f / "__init__.py").is_file()] == []


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
