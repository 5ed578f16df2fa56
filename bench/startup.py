"""Start-up: the whole process for the commands a hook or an agent runs at
every turn, against the bare interpreter, all in one run.

    python bench/startup.py [--runs 21] [--out bench/results/startup.json]

Each command is a fresh process of an installed console script, timed from
spawn to exit; the floor is ``python -c pass`` of the same interpreter (its
``site`` included, as the scripts' is). Commands: ``sessiond-hook status`` and
``sessiond-hook append`` of one entry (``written``) through a running daemon
(the entry point hooks and agents run: no click), the same two through
``sessiond`` (the click CLI people type), and for reference the bare imports
of msgspec (as the hook imports it, without typing_extensions, and plain) and
of click. Bytecode is written and a first round runs untimed, as on a user's
machine after the first use (``PYTHONDONTWRITEBYTECODE`` would make every run
compile the edited modules again). The runs interleave the commands, so a
noisy stretch hits them all alike; figures are medians and ratios to the
floor's median, of wall time and of the process's CPU time (user + system,
from ``wait4``), which a loaded machine disturbs less than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib

HERE = Path(__file__).resolve().parent
CWD = "/home/dev/startup-project"
LEAN_MSGSPEC = "import sys; sys.modules['typing_extensions'] = None; import msgspec"


def entry(text: str) -> bytes:
    return json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": text}}).encode() + b"\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--out", default=str(HERE / "results" / "startup.json"))
    args = ap.parse_args()
    scripts = {name: shutil.which(name, path=str(Path(sys.executable).parent)) for name in ("sessiond", "sessiond-hook")}
    if None in scripts.values():
        raise SystemExit("no sessiond/sessiond-hook console script beside this interpreter (pip install -e . first)")
    base = Path(tempfile.mkdtemp(prefix="sd-start-", dir="/tmp"))
    sock, root = base / "run" / "s.sock", base / "root"
    proc = benchlib.start_daemon(sock, root)
    glob = ["--socket", str(sock), "--root", str(root), "--no-autostart"]
    try:
        one = str(uuid.uuid4())
        commands = {
            "python -c pass": ([sys.executable, "-c", "pass"], None),
            # What the dependencies cost on their own: msgspec as the hook
            # imports it (without typing_extensions), plainly, and click.
            "python -c 'import msgspec' (lean)": ([sys.executable, "-c", LEAN_MSGSPEC], None),
            "python -c 'import msgspec'": ([sys.executable, "-c", "import msgspec"], None),
            "python -c 'import click'": ([sys.executable, "-c", "import click"], None),
        }
        hot = {
            "status": ([*glob, "status"], None),
            "append (1 entry)": ([*glob, "append", "--cwd", CWD, "--session", one, "--durability", "written"], "entry"),
        }
        for script in ("sessiond-hook", "sessiond"):
            for name, (argv, feed) in hot.items():
                commands[f"{script} {name}"] = ([scripts[script], *argv], feed)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for run in range(args.runs + 1):  # run 0 writes the bytecode: not timed
            for name, (cmd, feed) in commands.items():
                data = entry("one more") if feed else None
                before = benchlib.children_cpu()
                t = time.perf_counter()
                r = subprocess.run(cmd, input=data, capture_output=True, env=env)
                if run:
                    times[name].append(time.perf_counter() - t)
                    cpu[name].append(benchlib.children_cpu() - before)
                if r.returncode:
                    raise SystemExit(f"{name} exited {r.returncode}: {r.stderr.decode()}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)
    floor = statistics.median(times["python -c pass"])
    cpu_floor = statistics.median(cpu["python -c pass"])
    rows = {name: {"median_ms": statistics.median(t) * 1000, "min_ms": min(t) * 1000,
                   "vs_floor": statistics.median(t) / floor, "cpu_ms": statistics.median(cpu[name]) * 1000,
                   "cpu_vs_floor": statistics.median(cpu[name]) / cpu_floor} for name, t in times.items()}
    print("| command | wall ms (median) | wall min | vs `python -c pass` | CPU ms (median) | CPU vs floor |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| `{name}` | {r['median_ms']:.0f} | {r['min_ms']:.0f} | {r['vs_floor']:.2f}x | {r['cpu_ms']:.0f} | {r['cpu_vs_floor']:.2f}x |")
    load = os.getloadavg()
    print(f"load average during the run: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}")
    Path(args.out).write_text(json.dumps({"runs": args.runs, "python": sys.version.split()[0], "loadavg": load, "rows": rows},
                                         indent=2) + "\n")


if __name__ == "__main__":
    main()
