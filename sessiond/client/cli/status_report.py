"""``sessiond status``: the running daemon's figures, or exit 1 when none runs.

Click-free: the click command and ``sessiond-hook status`` both call ``report_status``.
"""

from __future__ import annotations

import sys

from sessiond.wire.errors import DaemonUnavailable

from . import Context
from .output import count, duration, echo, echo_json, size


def report_status(obj: Context, as_json: bool) -> None:
    """Print the figures (``--json``: one object with ``running``); a daemon
    that does not answer is exit 1, never a start."""
    try:
        with obj.client(autostart=False, other_root_ok=True) as c:  # its root is shown: a status, not this root's store
            st = c.status()
    except DaemonUnavailable as exc:
        if as_json:
            echo_json({"running": False, "socket": str(obj.socket), "error": str(exc)})
        else:
            echo(f"sessiond: not running ({exc})", err=True)
        sys.exit(1)
    outside = outside_writers(st.root)
    held = {w["sessionId"] for w in outside}
    outside += [{"sessionId": w.sessionId, "project": w.project, "secondsAgo": w.secondsAgo,
                 "writer": "written outside sessiond"}
                for w in st.writtenOutside if w.sessionId not in held]  # Claude Code between its writes
    if as_json:
        import msgspec

        data = msgspec.to_builtins(st)
        data.pop("op", None)
        data.pop("id", None)
        data.setdefault("stateFiles", [])  # always there: scripts check it is empty
        echo_json({"running": True, **data, "outsideWriters": outside})
        return
    cfg = st.config
    echo(f"sessiond {st.version}: pid {st.pid}, up {duration(st.uptime)}")
    echo(f"  socket    {st.socket}")
    echo(f"  root      {st.root}")
    written = f", {count(len(outside), 'session')} written by other processes" if outside else ""
    echo(f"  sessions  {st.sessions} open ({st.materialized} with files), {count(st.clients, 'client')}{written}")
    from .naming import line_title, named

    for w in outside[:LIVE_SHOWN]:
        how = (f"pid {w['pid']} holds it open for writing" if "pid" in w
               else f"written outside sessiond {w['secondsAgo']} s ago")
        name = named(str(w.get("path") or f"{st.root}/projects/{w['project']}/{w['sessionId']}.jsonl"), str(w["project"]))
        echo(f"  LIVE      {w['sessionId']} {line_title(name.title)}: {how} (Claude Code?), project {name.project}")
    if len(outside) > LIVE_SHOWN:
        echo(f"            and {len(outside) - LIVE_SHOWN} more (status --json lists them all)")
    echo(f"  queued    {count(st.queuedEntries, 'entry', 'entries')}, {size(st.queuedBytes)}; {st.pendingEntries} pending before materialization")
    if st.budgets:
        b = st.budgets
        echo("  budgets   " + ", ".join(
            f"{label} {size(b[key]['used'])}/{size(b[key]['limit'])}" if unit else f"{label} {b[key]['used']}/{b[key]['limit']}"
            for label, key, unit in (("pending", "pendingBytes", True), ("queued", "queuedBytes", True),
                                     ("frames", "partialBytes", True), ("clients", "clients", False),
                                     ("parked", "parkedRequests", False)) if key in b))
    echo(f"  written   {st.writes} writes, {size(st.bytesWritten)}, {st.fsyncs} fsyncs, {st.errors} errors")
    echo(f"  config    flush interval {cfg.get('flushIntervalMs')} ms, fsync {cfg.get('fsync')}")
    for bad in st.stateFiles:  # the daemon's own files it could not use at its start
        aside = f"; set aside as {bad.setAside}" if bad.setAside else ""
        echo(f"  STATE     {bad.file} not used: {bad.problem}{aside}")
    if st.mirror:
        mr = st.mirror
        state = "connected" if mr.get("connected") else "DISCONNECTED"
        echo(f"  mirror    {state} to {mr.get('servers')}, " + ", ".join(f"{k} {v}" for k, v in mr.items() if k not in ("servers", "connected")))
    if st.workers:
        echo(f"  reads     {pool_line(st.workers)}")
    if st.memory:
        echo(f"  memory    {memory_line(st.memory)}")
    echo(f"  index     {index_line(st.index) if st.index else 'off (searches scan the files)'}")


LIVE_SHOWN = 10
"""The live sessions of other writers ``status`` names one per line; ``--json`` has them all."""


def outside_writers(root: str) -> list[dict[str, str | int]]:
    """The sessions under the daemon's root that a process outside sessiond
    (Claude Code in a terminal) holds open for writing, as ``list`` marks them
    live (``store.writers``); by path, so the output is stable."""
    from pathlib import Path

    from sessiond.store.paths import projects_dir
    from sessiond.store.writers import sessions_written_under

    held = sessions_written_under(str(projects_dir(Path(root)))) if root else {}
    return [{"sessionId": Path(p).stem, "project": Path(p).parent.name, "path": p, "pid": pid, "writer": "open for writing"}
            for p, pid in sorted(held.items())]


def pool_line(w: dict) -> str:
    """The read pool (``StatusResult.workers``): threads, jobs running and
    waiting, requests refused as busy."""
    line = (f"{count(int(w.get('readThreads', 0)), 'thread')}, {w.get('jobsRunning', 0)} running, "
            f"{w.get('jobsWaiting', 0)} waiting, {w.get('jobsStarted', 0)} done since start")
    if w.get("busyRefused"):
        line += f", {w['busyRefused']} refused busy"
    return line


def memory_line(mem: dict) -> str:
    """The daemon's memory (``StatusResult.memory``): its RSS and the uuids
    it holds to drop duplicate entries."""
    line = f"{size(int(mem.get('rssBytes', 0)))} resident"
    uuids = int(mem.get("uuids", 0))
    if uuids:
        line += f", {count(uuids, 'uuid')} held for dedup ({size(int(mem.get('packedUuidBytes', 0)))} packed)"
    return line


def index_line(ix: dict) -> str:
    """The search index's state: ``ok``, or ``rebuilding`` (with progress) or
    ``scanning``, why, and that searches read the files meanwhile; its lag
    (files written and not yet indexed) and its size on disk."""
    state = str(ix.get("state"))
    if state == "starting" and not ix.get("running") and not ix.get("restarts"):
        state = "not started yet (the first search starts it)"
    total = int(ix.get("reindexTotalBytes") or 0)
    if total:
        state += f" {size(int(ix.get('reindexDoneBytes') or 0))}/{size(total)}"
    if ix.get("reason"):
        state += f" ({ix['reason']})"
    noted = int(ix.get("notedFiles") or 0)
    state += f", {count(noted, 'file')} waiting to be indexed" if noted else ", up to date"
    if (index_size := _file_size(ix.get("path"))) is not None:
        state += f", {size(index_size)}"
    if ix.get("state") in ("rebuilding", "scanning"):
        state += "; searches scan the files"
    if ix.get("rebuilds"):
        state += f"; rebuilt {count(int(ix['rebuilds']), 'time')} since start"
    return state


def _file_size(path: object) -> int | None:
    """The bytes of the index database and its write-ahead log, or None."""
    import os

    if not isinstance(path, str):
        return None
    total = None
    for name in (path, path + "-wal"):
        try:
            total = (total or 0) + os.stat(name).st_size
        except OSError:
            pass
    return total
