"""What a newcomer runs first: fork into a directory, check and repair a real
Claude Code file, install and uninstall the service for a custom store, a config
file or root that is not there, output piped into ``head``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.conftest import CORPUS, DaemonProc, run_cli
from tests.helpers import main_path, read_entries

BRIDGED = CORPUS / "entireio__cli__29-38d5d1ba71-0-full.jsonl"


@pytest.fixture
def daemon(shared_daemon: DaemonProc) -> DaemonProc:
    """One daemon for the module: every test here writes sessions of its own
    and leaves the daemon as it found it."""
    return shared_daemon
"""A Claude Code file with two dangling parents that resume bridges."""


def test_fork_with_cwd_lands_in_that_directory_and_resumes_there(daemon: DaemonProc, short_tmp):
    src = CORPUS / "blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full.jsonl"
    here = short_tmp / "checkout"
    here.mkdir()
    forked = json.loads(daemon.cli("fork", str(src), "--cwd", str(here), "--json").stdout)
    new_id = forked["sessionId"]
    assert forked["cwd"] == str(here)
    entries = read_entries(main_path(daemon.root, str(here), new_id))
    assert {e["cwd"] for e in entries if "cwd" in e} == {str(here)}
    listed = json.loads(daemon.cli("list", "--cwd", str(here), "--json").stdout)
    assert [s["sessionId"] for s in listed] == [new_id]
    resumed = daemon.cli("resume", new_id, "--cwd", str(here), "--json", check=False)
    assert resumed.returncode == 0 and b"cd " not in resumed.stderr, resumed.stderr
    assert json.loads(resumed.stdout)["sessionId"] == new_id


def test_check_warns_about_what_resume_bridges_and_repair_agrees(daemon: DaemonProc, short_tmp):
    r = daemon.cli("check", str(BRIDGED), check=False)
    assert r.returncode == 0, r.stdout
    first = r.stdout.decode().splitlines()[0]
    assert first.startswith("WARN ") and "2 dangling parents" in first and "resume bridges" in first, first
    assert r.stdout.decode().splitlines()[-1] == "1 file checked, 0 unhealthy, 1 with warnings"
    h = json.loads(daemon.cli("check", "--json", str(BRIDGED)).stdout)["files"][0]
    assert h["healthy"] and h["verdict"] == "warning" and len(h["danglingParents"]) == 2
    whole = BRIDGED.read_bytes().rstrip(b"\n") + b"\n"  # the corpus file lacks its last newline
    copy = short_tmp / "copy.jsonl"
    copy.write_bytes(whole)
    rep = daemon.cli("repair", str(copy), check=False)
    assert rep.returncode == 0 and rep.stdout.startswith(b"nothing to repair\nWARN "), rep.stdout
    # What does lose data stays unhealthy, says what to do, and repair never
    # calls it "nothing to repair".
    copy.write_bytes(whole + b"{\"type\":\"user\",\"mess")
    bad = daemon.cli("check", str(copy), check=False)
    assert bad.returncode == 1 and b"BAD " in bad.stdout and f"sessiond repair {copy}".encode() in bad.stdout
    junk = short_tmp / "junk.jsonl"
    junk.write_bytes(whole.replace(b"\n", b"\nnot json\n", 1))
    left = daemon.cli("repair", str(junk), check=False)
    assert left.returncode == 1 and b"nothing to repair" not in left.stdout
    assert left.stdout.startswith(b"changed nothing: what is left cannot be fixed"), left.stdout


def test_install_service_renders_a_custom_root_and_socket(short_tmp):
    env = {**os.environ, "SESSIOND_ROOT": str(short_tmp / "store"), "SESSIOND_SOCKET": str(short_tmp / "run" / "my.sock"),
           "XDG_CONFIG_HOME": str(short_tmp / "cfg"), "XDG_RUNTIME_DIR": str(short_tmp)}
    out = run_cli("install-service", "--systemd", "--print", env=env).stdout.decode()
    assert f"ListenStream={short_tmp / 'run' / 'my.sock'}\n" in out
    assert f'Environment="SESSIOND_ROOT={short_tmp / "store"}"\n' in out
    assert f'Environment="SESSIOND_SOCKET={short_tmp / "run" / "my.sock"}"\n' in out
    plain = {k: v for k, v in env.items() if k not in ("SESSIOND_ROOT", "SESSIOND_SOCKET")}
    plain["SESSIOND_CONFIG"] = str(short_tmp / "none.toml")
    generic = run_cli("install-service", "--systemd", "--print", env=plain).stdout.decode()
    assert "ListenStream=%t/sessiond/sessiond.sock\n" in generic and "Environment=" not in generic
    plist = run_cli("install-service", "--launchd", "--print", env=env).stdout.decode()
    assert "<key>SESSIOND_ROOT</key>" in plist and str(short_tmp / "store") in plist


def test_uninstall_service_removes_what_install_wrote_and_refuses_while_enabled(short_tmp):
    env = {**os.environ, "XDG_CONFIG_HOME": str(short_tmp / "cfg"), "SESSIOND_CONFIG": str(short_tmp / "none.toml")}
    run_cli("install-service", "--systemd", env=env)
    units = short_tmp / "cfg" / "systemd" / "user"
    assert sorted(p.name for p in units.iterdir()) == ["sessiond.service", "sessiond.socket"]
    wants = units / "sockets.target.wants"
    wants.mkdir()
    (wants / "sessiond.socket").symlink_to(units / "sessiond.socket")  # what `systemctl --user enable` leaves
    refused = run_cli("uninstall-service", "--systemd", env=env, check=False)
    assert refused.returncode == 1 and b"systemctl --user disable --now" in refused.stderr
    assert (units / "sessiond.service").exists()
    (wants / "sessiond.socket").unlink()
    done = run_cli("uninstall-service", "--systemd", env=env)
    assert done.stdout.count(b"removed ") == 2 and not (units / "sessiond.service").exists()
    assert b"daemon-reload" in done.stdout
    again = run_cli("uninstall-service", "--systemd", env=env)
    assert b"no service files installed" in again.stderr


def test_a_missing_config_file_or_a_root_that_is_a_file_stop_at_once(daemon_factory, short_tmp):
    d: DaemonProc = daemon_factory()
    r = d.cli("serve", "--config", str(short_tmp / "nonexistent.toml"), check=False, timeout=30)
    assert r.returncode == 2 and r.stderr == f"sessiond: config: {short_tmp / 'nonexistent.toml'}: no such config file\n".encode()
    afile = short_tmp / "not-a-dir"
    afile.write_text("x")
    s = d.cli("--root", str(afile), "start", check=False, timeout=30)
    assert s.returncode == 1 and s.stderr.count(b"\n") == 1
    assert f"root: {afile} is not a directory".encode() in s.stderr
    assert not d.socket.exists()  # no daemon was left running


@pytest.mark.parametrize("command", ["pull", "push"])
def test_pull_and_push_without_a_config_file_say_there_is_none(short_tmp, command):
    env = {**os.environ, "SESSIOND_ROOT": str(short_tmp / "root"), "SESSIOND_CONFIG": str(short_tmp / "absent.toml")}
    r = run_cli(command, str(uuid.uuid4()), env=env, check=False)
    assert r.returncode == 1 and r.stderr.count(b"\n") == 1
    assert f"there is no config file {short_tmp / 'absent.toml'}".encode() in r.stderr and b"--server" in r.stderr
    named = run_cli(command, str(uuid.uuid4()), "--config", str(short_tmp / "typo.toml"), env=env, check=False)
    assert named.returncode == 1 and b"typo.toml: no such config file" in named.stderr


@pytest.mark.parametrize("args", [["tail", "-n", "100000", str(CORPUS / "blackgirlbytes__planetfall-seed-signalkit__07-d253ca52d8-3-full.jsonl")],
                                  ["install-service", "--print"], ["check", str(CORPUS)], ["status"]])
def test_a_reader_that_goes_away_ends_the_command_quietly_with_141(daemon: DaemonProc, args):
    """``sessiond ... | head``: the pipe's reader is gone before the first write
    (closed at once), so every command meets the broken pipe for sure."""
    rd, wr = os.pipe()
    os.close(rd)
    try:
        proc = subprocess.run([sys.executable, "-m", "sessiond.client.cli", *args], stdout=wr, stderr=subprocess.PIPE,
                              env=daemon.env, timeout=60)
    finally:
        os.close(wr)
    assert proc.stderr == b"" and proc.returncode == 141, (proc.returncode, proc.stderr)


def test_times_are_local_with_the_date_when_not_today_and_json_stays_utc(daemon: DaemonProc, short_tmp):
    path = short_tmp / "old.jsonl"
    old = {"type": "user", "uuid": "u1", "parentUuid": None, "timestamp": "2025-03-02T23:30:00.000Z",
           "message": {"role": "user", "content": "from last year"}}
    path.write_text(json.dumps(old) + "\n")
    tokyo = daemon.cli("tail", str(path), env={"TZ": "Asia/Tokyo"}).stdout.decode()
    assert tokyo.startswith("── user 2025-03-03 08:30 "), tokyo  # UTC+9: the next day (in the turn's header)
    utc = daemon.cli("tail", str(path), env={"TZ": "UTC"}).stdout.decode()
    assert utc.startswith("── user 2025-03-02 23:30 "), utc
    shown = daemon.cli("show", str(path), env={"TZ": "Asia/Tokyo"}).stdout.decode()
    assert "2025-03-03 08:30" in shown
    raw = json.loads(daemon.cli("tail", "--json", str(path), env={"TZ": "Asia/Tokyo"}).stdout)
    assert raw["timestamp"] == "2025-03-02T23:30:00.000Z"


def test_blocking_commands_import_no_event_loop():
    """``--help``, status, append and list use a blocking socket: importing the
    CLI must not pull in anyio, asyncio or uvloop, nor msgspec before a command
    needs it (a hook or prompt pays for every import at every run)."""
    code = ("import sys; import sessiond.client.cli; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'anyio', 'asyncio', 'uvloop', 'nats', 'ssl', 'msgspec'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=60).stdout
    assert out == b"[]\n"
    import_all = ("import sys; import sessiond.client as c; c.Client; c.Session; "
                  "print('anyio' in sys.modules, 'asyncio' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", import_all], capture_output=True, check=True, timeout=60).stdout == b"False False\n"
    lazy = "import sessiond.client as c; print(c.AsyncClient.__name__)"
    assert subprocess.run([sys.executable, "-c", lazy], capture_output=True, check=True, timeout=60).stdout == b"AsyncClient\n"


def test_the_cli_durability_choices_are_the_protocols():
    from sessiond.client.cli.write_cmds import DURABILITY_CHOICES
    from sessiond.wire.messages import DURABILITIES

    assert DURABILITY_CHOICES == DURABILITIES


def all_commands() -> dict:
    import click

    from sessiond.client.cli import cli

    ctx = click.Context(cli)
    return {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}


def test_every_option_has_help_and_no_description_is_cut_off():
    import click

    commands = all_commands()
    missing = [f"{name} {p.opts[0]}" for name, cmd in commands.items() for p in cmd.params
               if isinstance(p, click.Option) and not p.hidden and not p.help]
    assert missing == []
    listing = run_cli("--help", env={**os.environ, "COLUMNS": "100"}).stdout.decode()
    for name, cmd in commands.items():
        if not cmd.hidden:
            assert cmd.get_short_help_str(limit=1000).rstrip(".") in " ".join(listing.split()), name


def test_each_command_is_imported_from_the_module_the_table_names():
    """A run imports one command module (COMMAND_MODULES); the table must say
    truly where each command lives, and every command must be in it."""
    from sessiond.client.cli import COMMAND_MODULES

    for name, cmd in all_commands().items():
        assert cmd.callback.__module__ == f"sessiond.client.cli.{COMMAND_MODULES[name]}", name
    code = ("import sys, click; from sessiond.client.cli import cli; cli.get_command(click.Context(cli), 'status'); "
            "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('sessiond.client.cli.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=60).stdout
    assert out == b"['daemon_cmds', 'group', 'output']\n"


def test_make_install_cli_puts_sessiond_on_path(short_tmp):
    """The one step the quick start gives after ``make run``: ``sessiond`` in
    another terminal, from any directory."""
    import shutil

    from tests.conftest import REPO

    if not shutil.which("make"):
        pytest.skip("make not installed")
    bindir = short_tmp / "bin"
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    # -o: the venv is what runs these tests; never rebuild it from here.
    r = subprocess.run(["make", "-s", "-C", str(REPO), "-o", ".venv/.installed", "install-cli", f"BINDIR={bindir}"],
                       capture_output=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (bindir / "sessiond").resolve() == (REPO / ".venv" / "bin" / "sessiond").resolve()
    assert f"{bindir} is not on your PATH".encode() in r.stdout
    elsewhere = subprocess.run(["sessiond", "--version"], cwd=short_tmp, capture_output=True, timeout=60,
                               env={**env, "PATH": f"{bindir}:/usr/bin:/bin"})
    assert elsewhere.returncode == 0 and elsewhere.stdout.startswith(b"sessiond, version ")


@pytest.mark.slow
@pytest.mark.timeout(600)  # a venv made and filled, then removed: half a minute alone, minutes on a loaded machine
def test_make_install_of_a_fresh_checkout_prints_no_notices(short_tmp):
    """``make install`` on a fresh clone: a venv, this checkout installed
    editable, and nothing on the terminal but what the machine's own pip
    configuration makes pip say (an index location that does not exist):
    setuptools' "Editable installation" notice is information, not news."""
    import shutil

    from tests.conftest import REPO

    if not shutil.which("make"):
        pytest.skip("make not installed")
    venv = short_tmp / "venv"
    r = subprocess.run(["make", "-s", "-C", str(REPO), f"VENV={venv}", "install"], capture_output=True, timeout=600,
                       env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stderr
    said = (r.stdout + r.stderr).decode(errors="replace")
    # what pip itself may say depends on the machine (its index config, its network retries): only the
    # build's own notices are this project's to keep quiet
    assert "Editable installation" not in said and "Traceback" not in said and "deprecated" not in said, said
    version = subprocess.run([str(venv / "bin" / "sessiond"), "--version"], capture_output=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith(b"sessiond, version ")


def test_shell_completion_lists_the_commands(short_tmp):
    """Documented in docs/usage.md: click's completion, driven by _SESSIOND_COMPLETE."""
    env = {**os.environ, "_SESSIOND_COMPLETE": "bash_complete", "COMP_WORDS": "sessiond sta", "COMP_CWORD": "1"}
    r = subprocess.run([sys.executable, "-m", "sessiond.client.cli"], capture_output=True, env=env, timeout=60)
    words = {line.split(",", 1)[1] for line in r.stdout.decode().splitlines() if "," in line}
    assert words == {"start", "status"}, r.stdout
    script = subprocess.run([sys.executable, "-m", "sessiond.client.cli"], capture_output=True, timeout=60,
                            env={**os.environ, "_SESSIOND_COMPLETE": "bash_source"})
    assert b"_sessiond_completion" in script.stdout


def test_resume_and_fork_find_what_is_not_written_until_the_next_drain(daemon_factory):
    """Acknowledged as `queued` with a long coalescing window: the file does not
    exist yet (or lacks the last entry) when the command starts; resume and fork
    flush the session first, then look for it."""
    from sessiond.wire import messages as m
    from tests.helpers import line, user

    d: DaemonProc = daemon_factory().start("--flush-interval", "30000")
    sid, cwd = str(uuid.uuid4()), "/work/queued"
    with d.client() as c:
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(user("hello", "u1"))]))  # queued
        assert not main_path(d.root, cwd, sid).exists()
        out = json.loads(d.cli("resume", sid, "--cwd", cwd, "--json").stdout)
        c.call(m.Append(id=c.next_id(), session=sid, cwd=cwd, entries=[line(user("more", "u2", parentUuid="u1"))]))
        forked = json.loads(d.cli("fork", sid, "--cwd", cwd, "--json").stdout)  # fork flushes first too
    assert out["chain"] == ["u1"]
    assert forked["messages"] == 2
