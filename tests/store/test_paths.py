"""Path sanitizing matches Claude Code's JavaScript, and ids cannot traverse."""

import json
import unicodedata
from pathlib import Path

import pytest

from sessiond.store import paths
from sessiond.wire.errors import SessiondError

VECTORS = json.loads((Path(__file__).parent / "sanitize_vectors.json").read_text())["vectors"]


@pytest.mark.parametrize("vec", VECTORS, ids=lambda v: v["name"][:40])
def test_sanitize_matches_values_computed_by_the_js_rule(vec):
    assert paths.djb2(vec["name"]) == vec["djb2"]
    assert paths.sanitize(vec["name"]) == vec["sanitized"]


def test_astral_characters_become_two_dashes():
    assert paths.sanitize("a😀b") == "a--b"
    assert paths.sanitize("é") == "-"


def test_long_names_keep_200_chars_then_a_hash():
    name = "/" + "x" * 300
    out = paths.sanitize(name)
    assert out.startswith("-" + "x" * 199 + "-")
    assert len(out.split("-")[-1]) > 0
    assert out == paths.sanitize(name)


def test_canonical_cwd_is_realpath_and_nfc(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert paths.canonical_cwd(str(link)) == str(real)
    decomposed = unicodedata.normalize("NFD", "/tmp/café")
    assert paths.canonical_cwd(decomposed) == unicodedata.normalize("NFC", "/tmp/café")


@pytest.mark.parametrize("bad", ["relative/dir", "", "/tmp/a\x00b"])
def test_bad_cwd_is_refused(bad):
    with pytest.raises(SessiondError) as err:
        paths.canonical_cwd(bad)
    assert err.value.code == "bad_request"


@pytest.mark.parametrize("bad", ["../etc", "not-a-uuid", "cb77ee11-31c9-4f9a-9dc3-3cf520a35d4", "cb77ee11-31c9-4f9a-9dc3-3cf520a35d40/..", ""])
def test_session_ids_must_be_uuids(bad):
    with pytest.raises(SessiondError):
        paths.check_session_id(bad)


@pytest.mark.parametrize("bad", ["..", "a/b", "a" * 129, "", "a b", "é", "x\x00"])
def test_agent_ids_are_restricted(bad):
    with pytest.raises(SessiondError):
        paths.agent_file(Path("/r"), "cb77ee11-31c9-4f9a-9dc3-3cf520a35d40", bad)


def test_layout_of_agent_and_workflow_files():
    p = Path("/r/projects/-p")
    sid = "cb77ee11-31c9-4f9a-9dc3-3cf520a35d40"
    assert paths.session_file(p, sid) == p / f"{sid}.jsonl"
    assert paths.agent_file(p, sid, "a1") == p / sid / "subagents" / "agent-a1.jsonl"
    assert paths.agent_file(p, sid, "a1", "run_7") == p / sid / "subagents" / "workflows" / "run_7" / "agent-a1.jsonl"
    assert paths.agent_meta_file(p, sid, "a1") == p / sid / "subagents" / "agent-a1.meta.json"
    assert paths.remote_agent_meta_file(p, sid, "t9") == p / sid / "remote-agents" / "remote-agent-t9.meta.json"
