"""The trash never trusts what is on disk (issue 27).

Whoever can write the store root can write a trash manifest. Each test plants
hostile manifests (or names that are not UTF-8) beside real trashed sessions,
then runs a real daemon process and the real CLI over them: a manifest that is
not a small regular file, names a path out of the root, or carries a date or a
count out of range is skipped with a warning, while the daemon starts and
serves and every other entry lists, restores and empties as before. Nothing
outside the root is read, moved, created or deleted: each test keeps a canary
beside the root and compares everything there before and after.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.adversarial.attacks import MiB, peak_rss, plant
from tests.adversarial.conftest import ADDRESS_SPACE
from tests.helpers import line, main_path, user

CWD = "/work/tamper"
CLI_TIMEOUT = 60


def _json(proc) -> object:
    return json.loads(proc.stdout)


def session(d, text: str = "hello") -> str:
    """A new session of one line in ``CWD``'s project (through the daemon when it runs)."""
    sid = str(uuid.uuid4())
    d.cli("--no-autostart", "append", "--cwd", CWD, "--session", sid, input=line(user(text)))
    return sid


def trashed(d, text: str = "hello") -> tuple[str, Path]:
    """A new session moved into the trash: its id and its entry's directory."""
    sid = session(d, text)
    d.cli("--no-autostart", "rm", sid, "--cwd", CWD)
    (entry,) = [p for p in (d.root / ".trash").iterdir() if p.name.endswith(sid)]
    return sid, entry


def forge(entry: Path, **fields: object) -> None:
    """Rewrite fields of an entry's manifest, as someone with write access to the root could."""
    manifest = entry / "manifest.json"
    data = json.loads(manifest.read_bytes())
    data.update(fields)
    manifest.write_text(json.dumps(data))


def listed(d) -> set[str]:
    return {e["session"] for e in _json(d.cli("--no-autostart", "trash", "--json", timeout=CLI_TIMEOUT))}


def beside_the_root(d) -> dict[str, tuple[str, bytes]]:
    """Everything in the daemon's base dir but the root, the socket dir and the
    log: every file's bytes, every link's target, every dir."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirs, files in os.walk(d.base):
        here = Path(dirpath)
        dirs[:] = [n for n in dirs if here / n not in (d.root, d.socket.parent)]
        for n in dirs + files:
            p = here / n
            if p == d.log:
                continue
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p).encode())
            elif p.is_dir():
                out[str(p)] = ("dir", b"")
            else:
                out[str(p)] = ("file", p.read_bytes())
    return out


def canary(d) -> Path:
    """A dir beside the root holding a file nobody may touch."""
    outside = d.base / "outside"
    outside.mkdir()
    (outside / "canary.jsonl").write_bytes(line(user("keep me")) + b"\n")
    return outside


def serves(d) -> None:
    """The daemon is alive and answers, and takes a new session."""
    assert d.proc is not None and d.proc.poll() is None, d.log_text()[-2000:]
    with d.client() as c:
        c.status()
    session(d, "still served")


def test_a_manifest_that_is_not_a_small_regular_file_is_skipped_never_opened_or_read_whole(daemon_factory):
    """A FIFO, a symlink to /dev/zero, a directory, a sparse gigabyte and an entry
    dir symlinked out of the root, where a manifest should be: the daemon
    starts (its recovery skips them, saying so) without its memory growing,
    ``trash`` lists the good entry alone without hanging, and the good entry
    restores."""
    d = daemon_factory()
    outside = canary(d)
    good, _ = trashed(d, "good")
    kinds = ("fifo", "dev-zero", "directory", "sparse", "linked-entry")
    bad = {kind: trashed(d, kind)[1] for kind in kinds}  # all made before any is planted: an rm settles the trash first
    for kind, entry in bad.items():
        manifest = entry / "manifest.json"
        if kind == "linked-entry":  # the whole entry, a valid one, lives outside and is linked in
            shutil.move(entry, outside / "entry")
            entry.symlink_to(outside / "entry")
            continue
        manifest.unlink()
        plant(manifest, kind, size=1 << 30)
    before = beside_the_root(d)

    d.start(address_space=ADDRESS_SPACE)
    assert peak_rss(d.pid) < 256 * MiB  # the sparse gigabyte was never read
    serves(d)
    assert d.log_text().count("trash: skipping entry") >= len(bad)
    out = d.cli("--no-autostart", "trash", "--json", timeout=CLI_TIMEOUT)
    assert {e["session"] for e in _json(out)} == {good}
    assert out.stderr.count(b"skipping entry") == len(bad)
    d.cli("--no-autostart", "restore", good, timeout=CLI_TIMEOUT)
    assert main_path(d.root, CWD, good).exists()
    d.cli("--no-autostart", "trash", "empty", "--yes", timeout=CLI_TIMEOUT)
    assert beside_the_root(d) == before
    assert peak_rss(d.pid) < 256 * MiB
    serves(d)


def test_start_up_recovery_never_moves_a_file_into_or_out_of_the_root(daemon_factory):
    """Manifests of an interrupted rm or restore (states ``trashing``, ``restoring``)
    naming ``../`` paths, an absolute path, or a project dir that is a symlink
    out of the root: start-up recovery would have moved the canary into the
    trash or a planted file out of it. It skips each, logs it, and the
    daemon serves; everything beside the root is as it was."""
    d = daemon_factory()
    outside = canary(d)
    (outside / "victim.jsonl").write_bytes(b"outside\n")

    (_, e1), (_, e2), (sid3, e3), (_, e4) = [trashed(d) for _ in range(4)]  # all made before any is planted
    (d.root / "projects" / "evil").symlink_to(outside)

    # restoring, half put back, the canary "already restored": rolled back into the trash.
    main1 = json.loads((e1 / "manifest.json").read_bytes())["items"][0]
    (e1 / "outside").mkdir()
    forge(e1, state="restoring", items=[main1, {"path": "../outside/canary.jsonl", "kind": "file", "bytes": 1}])
    # trashing, half moved: the planted file "moved back" out of the root.
    (e2 / "outside").mkdir()
    (e2 / "outside" / "planted.jsonl").write_bytes(b"planted\n")
    forge(e2, state="trashing", items=[{"path": "../outside/planted.jsonl", "kind": "file", "bytes": 1},
                                       {"path": "projects/p/gone.jsonl", "kind": "file", "bytes": 1}])
    # restoring, half put back through a project dir linked out of the root: the
    # file outside "already restored" would be rolled back into the trash.
    (e3 / "files" / "projects" / "evil").mkdir()
    (e3 / "files" / "projects" / "evil" / f"{sid3}.jsonl.torn").write_bytes(b"still in the trash\n")
    forge(e3, state="restoring", items=[{"path": f"projects/evil/{sid3}.jsonl", "kind": "file", "bytes": 1},
                                        {"path": f"projects/evil/{sid3}.jsonl.torn", "kind": "file", "bytes": 1}])
    (outside / f"{sid3}.jsonl").write_bytes(b"outside, named as the session\n")
    # an absolute path.
    forge(e4, state="restoring", items=[{"path": str(outside / "victim.jsonl"), "kind": "file", "bytes": 1}])
    before = beside_the_root(d)

    d.start()
    serves(d)
    assert beside_the_root(d) == before
    assert d.log_text().count("trash: skipping entry") >= 4, d.log_text()
    d.cli("--no-autostart", "trash", "empty", "--yes", timeout=CLI_TIMEOUT)
    assert beside_the_root(d) == before


def test_restore_never_moves_a_file_into_or_out_of_the_root(daemon_factory):
    """Trashed entries whose items are ``../`` paths, an absolute path, a path with
    a NUL, a path through a project dir linked out of the root, or whose copy
    in the trash lies behind a symlink to a dir outside: ``restore`` of each
    fails with one line on stderr and moves nothing, a good entry still
    restores, and everything beside the root is as it was."""
    d = daemon_factory()
    d.start()
    outside = canary(d)
    good, _ = trashed(d, "good")
    (d.root / "projects" / "evil").symlink_to(outside)

    attacks = []
    sid, e = trashed(d)  # ../ : the planted copy would land outside
    (e / "outside").mkdir()
    (e / "outside" / "planted.jsonl").write_bytes(b"planted\n")
    forge(e, items=[{"path": "../outside/planted.jsonl", "kind": "file", "bytes": 1}])
    attacks.append(sid)
    sid, e = trashed(d)  # absolute
    forge(e, items=[{"path": str(outside / "abs.jsonl"), "kind": "file", "bytes": 1}])
    attacks.append(sid)
    sid, e = trashed(d)  # NUL
    forge(e, items=[{"path": f"projects/p/{sid}.jsonl\u0000", "kind": "file", "bytes": 1}])
    attacks.append(sid)
    sid, e = trashed(d)  # restored through a project dir linked out of the root
    (e / "files" / "projects" / "evil").mkdir()
    (e / "files" / "projects" / "evil" / f"{sid}.jsonl").write_bytes(b"would land outside\n")
    forge(e, items=[{"path": f"projects/evil/{sid}.jsonl", "kind": "file", "bytes": 1}])
    attacks.append(sid)
    sid, e = trashed(d)  # the copy in the trash behind a symlink: the file outside would come in
    project = next((e / "files" / "projects").iterdir())
    shutil.rmtree(project)
    project.symlink_to(outside)
    (outside / f"{sid}.jsonl").write_bytes(b"outside, named as the session\n")
    attacks.append(sid)
    before = beside_the_root(d)

    for sid in attacks:
        out = d.cli("--no-autostart", "restore", sid, check=False, timeout=CLI_TIMEOUT)
        assert out.returncode == 1 and out.stderr.startswith(b"sessiond: ") and b"Traceback" not in out.stderr, out.stderr
        assert not main_path(d.root, CWD, sid).exists()
    assert beside_the_root(d) == before
    d.cli("--no-autostart", "restore", good, timeout=CLI_TIMEOUT)
    assert main_path(d.root, CWD, good).exists()
    serves(d)


def test_trash_empty_deletes_nothing_a_manifest_points_at_outside_the_trash(daemon_factory):
    """An entry whose manifest names itself ``../../outside`` (the dir of the
    canary) or another entry: ``trash empty`` deletes the real entries and
    leaves the canary, the other entry's files, and everything beside the
    root as they were."""
    d = daemon_factory()
    d.start()
    outside = canary(d)
    sid1, e1 = trashed(d)
    forge(e1, name="../../outside")
    good, e_good = trashed(d, "good")
    sid3, e3 = trashed(d)
    forge(e3, name=e_good.name)
    before = beside_the_root(d)
    gone = _json(d.cli("--no-autostart", "trash", "empty", "--yes", "--json", timeout=CLI_TIMEOUT))
    assert {e["session"] for e in gone["deleted"]} == {good}
    assert beside_the_root(d) == before and (outside / "canary.jsonl").exists()
    assert listed(d) == set()  # the forged ones are skipped, still there
    assert {p.name[-36:] for p in (d.root / ".trash").iterdir() if not p.name.startswith(".")} == {sid1, sid3}
    serves(d)


BAD_FIELDS = {
    "month 13": {"trashedAt": "2026-13-01T00:00:00.000Z"},
    "1e300": {"trashedAt": 1e300},
    "negative": {"trashedAt": -1},
    "not a date": {"trashedAt": "yesterday"},
    "before 1970": {"trashedAt": "1900-01-01T00:00:00.000Z"},
    "bytes -1": {"bytes": -1},
    "bytes 2**70": {"bytes": 2**70},
    "files -1": {"files": -1},
    "item bytes 2**70": {"items": "2**70"},
}


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_a_date_or_count_out_of_range_skips_that_entry_alone(daemon_factory, with_daemon):
    """``trashedAt`` of month 13, 1e300, negative, not a date, before 1970; a byte
    or file count of -1 or 2**70: that entry is skipped with a warning, and
    ``trash``, ``trash empty --older-than`` and ``restore`` of the other
    entries all still work."""
    d = daemon_factory()
    if with_daemon:
        d.start()
    old, e_old = trashed(d, "old")
    forge(e_old, trashedAt="2001-01-01T00:00:00.000Z")
    recent, _ = trashed(d, "recent")
    for fields in BAD_FIELDS.values():
        _, e = trashed(d)
        if fields.get("items") == "2**70":
            items = json.loads((e / "manifest.json").read_bytes())["items"]
            fields = {"items": [{**items[0], "bytes": 2**70}]}
        forge(e, **fields)

    out = d.cli("--no-autostart", "trash", timeout=CLI_TIMEOUT)
    assert old.encode() in out.stdout and recent.encode() in out.stdout
    assert len(out.stdout.splitlines()) == 2
    assert out.stderr.count(b"skipping entry") == len(BAD_FIELDS)
    assert listed(d) == {old, recent}
    dry = _json(d.cli("--no-autostart", "trash", "empty", "--older-than", "30d", "--dry-run", "--json", timeout=CLI_TIMEOUT))
    assert [e["session"] for e in dry["deleted"]] == [old]
    d.cli("--no-autostart", "restore", recent, timeout=CLI_TIMEOUT)
    assert main_path(d.root, CWD, recent).exists()
    gone = _json(d.cli("--no-autostart", "trash", "empty", "--older-than", "30d", "--yes", "--json", timeout=CLI_TIMEOUT))
    assert [e["session"] for e in gone["deleted"]] == [old]
    assert len([p for p in (d.root / ".trash").iterdir() if not p.name.startswith(".")]) == len(BAD_FIELDS)
    if with_daemon:
        serves(d)
        d.stop()
        d.start()  # its recovery reads them all again
        serves(d)


@pytest.mark.parametrize("with_daemon", [True, False], ids=["daemon", "no-daemon"])
def test_a_session_whose_names_are_not_utf8_goes_to_the_trash_and_back_byte_for_byte(daemon_factory, with_daemon):
    """A session in a project dir named ``-proj\\xff``, with a subagent dir and file
    whose names are not UTF-8 either: ``rm`` moves it, ``trash`` lists it
    (the name shown escaped), ``restore`` puts back every name and byte,
    and ``trash empty`` deletes it; never an io_error or a traceback."""
    d = daemon_factory()
    if with_daemon:
        d.start()
    sid = str(uuid.uuid4())
    project = os.fsencode(d.root / "projects") + b"/-proj\xff"
    tree = {
        f"{sid}.jsonl".encode(): line(user("not utf-8 around me", sessionId=sid)) + b"\n",
        sid.encode() + b"/sub\xfe/agent-a\xfd.jsonl": line(user("agent")) + b"\n",
    }
    for rel, data in tree.items():
        os.makedirs(os.path.dirname(project + b"/" + rel), exist_ok=True)
        with open(project + b"/" + rel, "wb") as f:
            f.write(data)

    def on_disk() -> dict[bytes, bytes]:
        out = {}
        for dirpath, _dirs, files in os.walk(project):
            for n in files:
                p = os.path.join(dirpath, n)
                with open(p, "rb") as f:
                    out[os.path.relpath(p, project)] = f.read()
        return out

    assert on_disk() == tree
    # --force: the files were just written outside sessiond, which a daemon takes for Claude Code writing them
    rm = d.cli("--no-autostart", "rm", sid, "--json", "--force", timeout=CLI_TIMEOUT)
    assert _json(rm)[0]["session"] == sid and on_disk() == {}
    shown = d.cli("--no-autostart", "trash", timeout=CLI_TIMEOUT)
    assert sid.encode() in shown.stdout and b"-proj\\xff" in shown.stdout and shown.stderr.count(b"\n") == 1
    restored = d.cli("--no-autostart", "restore", sid, timeout=CLI_TIMEOUT)
    assert b"Traceback" not in restored.stderr
    assert on_disk() == tree
    d.cli("--no-autostart", "rm", sid, timeout=CLI_TIMEOUT)
    emptied = _json(d.cli("--no-autostart", "trash", "empty", "--yes", "--json", timeout=CLI_TIMEOUT))
    assert [e["session"] for e in emptied["deleted"]] == [sid]
    assert os.listdir(d.root / ".trash") == [".lock"] and on_disk() == {}
    if with_daemon:
        serves(d)
