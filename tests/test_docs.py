"""The generated reference pages (``docs/cli.md``, ``docs/configuration.md``)
are what ``docs/generate.py`` makes of the code now: a new command, option or
config key, or a changed help text, fails here until the page is regenerated
(``python docs/generate.py``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from types import ModuleType

import pytest

from tests.conftest import REPO


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", REPO / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["cli.md", "configuration.md"])
def test_generated_page_is_current(page: str) -> None:
    expected = generator().PAGES[page]()
    assert (REPO / "docs" / page).read_text() == expected, f"docs/{page} is stale: run python docs/generate.py"


def test_pages_cover_every_command_and_key() -> None:
    """Nothing is left out of the walk: each command click lists, and each key
    of the config file (top level and ``[mirror]``), has its entry."""
    import click

    from sessiond.client.cli.group import cli
    from sessiond.config_keys import FileConfig, MirrorFileConfig

    cli_page = (REPO / "docs" / "cli.md").read_text()
    ctx = click.Context(cli, info_name="sessiond")
    for name in cli.list_commands(ctx):
        assert f"## sessiond {name}\n" in cli_page
    assert "## sessiond trash empty\n" in cli_page
    config_page = (REPO / "docs" / "configuration.md").read_text()
    for key in FileConfig.__struct_fields__:
        if key != "mirror":
            assert f"| `{key}` |" in config_page
    for key in MirrorFileConfig.__struct_fields__:
        assert f"| `mirror.{key}` |" in config_page


def test_pages_do_not_depend_on_the_machine(tmp_path) -> None:
    """Another home, runtime dir and terminal width give the same pages: what
    is committed is not one machine's paths or one terminal's wrapping."""
    env = {**os.environ, "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path), "XDG_DATA_HOME": str(tmp_path),
           "XDG_CONFIG_HOME": str(tmp_path), "COLUMNS": "200"}
    for var in ("SESSIOND_ROOT", "SESSIOND_SOCKET", "SESSIOND_CONFIG"):
        env.pop(var, None)
    code = ("import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location('g', sys.argv[1]); m = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(m)\n"
            "sys.stdout.write(''.join(render() for render in m.PAGES.values()))\n")
    r = subprocess.run([sys.executable, "-c", code, str(REPO / "docs" / "generate.py")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "".join((REPO / "docs" / page).read_text() for page in generator().PAGES)
