"""Every public class of ``sessiond/`` says what it is for, and no docstring
carries history or one machine's timings (history goes in CHANGELOG.md,
figures in docs/benchmarks.md).

Read from the source (``ast``), nothing imported: a module that fails to
import is still checked, and the check costs no daemon or interpreter start."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "sessiond"

HISTORY_OR_TIMING = re.compile(
    r"\bused to\b"  # "it used to keep a buffer of its own"
    r"|\bbefore this change\b"
    r"|\bwas gone for\b"
    r"|\b(?:issue|stop) #?\d+\b"  # a tracker's number: meaningless to a reader of the code
    r"|\bthis (?:\d+-core )?(?:machine|VM|box|laptop)\b"
    r"|\bmeasured here\b"
    r"|\d\s?(?:ms|µs|us|ns|s|[KMG]i?B/s) (?:here|on this)\b"  # "takes 3 ms here", "copies at 8 GB/s here"
    r"|(?:~|\babout )\d[\d.,]*\s?(?:ms|µs|us|ns)\b"  # "~80 ms", "about 2 ms": a measurement
    r"|\b\d+(?:\.\d+)?x (?:faster|slower|the\b)",  # "4x faster", "1.3x the frames/s"
    re.IGNORECASE,
)
"""Phrases that only history or one machine's measurement uses. A short list on
purpose: each pattern has no false positive in the tree; a behaviour stated in
time units ("1 ms apart", "every 30 s") matches none of them."""


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def undocumented(tree: ast.Module) -> Iterator[ast.ClassDef]:
    """Public classes defined at module level without a docstring."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and ast.get_docstring(node) is None:
            yield node


def docstrings(tree: ast.Module) -> Iterator[tuple[str, int, str]]:
    """(what, line, text) of the module's docstring and of every class's and function's in it."""
    doc = ast.get_docstring(tree)
    if doc:
        yield "module", 1, doc
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                yield node.name, node.lineno, doc


def test_every_public_class_has_a_docstring():
    missing = [f"{path.relative_to(REPO)}:{node.lineno}: class {node.name}"
               for path in modules() for node in undocumented(ast.parse(path.read_text(), str(path)))]
    assert not missing, "public classes without a docstring (say what each is for and why it exists):\n" + "\n".join(missing)


def test_no_docstring_carries_history_or_timings():
    found = [f"{path.relative_to(REPO)}:{line}: {what}: {match.group(0)!r}"
             for path in modules() for what, line, doc in docstrings(ast.parse(path.read_text(), str(path)))
             for match in HISTORY_OR_TIMING.finditer(doc)]
    assert not found, ("docstrings that tell history or one machine's timings (say what the code does and why; "
                       "history goes in CHANGELOG.md, figures in docs/benchmarks.md):\n" + "\n".join(found))


def test_the_rules_catch_what_they_are_for():
    """Each rule on a sample of its own: a rule that matches nothing checks nothing."""
    assert [n.name for n in undocumented(ast.parse("class A:\n    x = 1\nclass _B:\n    pass\n"
                                                   "class C:\n    '''For C.'''\ndef f():\n    class D: pass\n"))] == ["A"]
    for bad in ("It used to hold a buffer.", "Before this change it copied.", "See issue 16.", "stop 12 fixed it",
                "(figures: this 2-core VM)", "~80 ms per 100 MB", "about 2 ms", "costs 20-40 µs here", "copies at ~8 GB/s here",
                "1.3x the frames/s", "reads run 4x faster", "measured here", "the field was gone for a while"):
        assert HISTORY_OR_TIMING.search(bad), bad
    for fine in ("strictly increasing (1 ms apart on a tie)", "every 30 s and at start", "the buckets grow 4x when full",
                 "no longer the file being written", "``45s`` in seconds", "a 2 MB file dump"):
        assert not HISTORY_OR_TIMING.search(fine), fine
