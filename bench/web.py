"""The web view (``sessiond web``) on a real store, driven in a real headless
Chromium, all in one run:

    python bench/web.py [--sessions 10000] [--messages 1000] [--runs 5]

Figures (medians of ``--runs``):
- ``first byte``: a plain HTTP GET until the status line and headers arrived
  (the page is rendered before its first byte), for the conversation of
  ``--messages`` messages, the projects page and the sessions page of a store
  of ``--sessions`` sessions; baseline in the same run: the stylesheet, which
  reads nothing, and ``find_sessions`` of every session in this process
  (what both listing pages ask the daemon first);
- ``rendered in the browser``: ``driver.get`` of the conversation until its
  load event (the DOM built and laid out, the stylesheet and script loaded);
- ``search as you type``: each prefix of a query as the page asks it
  (``/api/search``), and in the browser from a key typed to the results shown
  (the page waits 120 ms for the next key first; the word being typed is a
  prefix); baseline in the same run:
  the daemon's own ``Search`` for the whole query through the blocking client;
- ``live``: from the daemon's ack of an ``append`` to the browser: the
  ``changed`` event received, and the new message in the page (its body
  fetched and rendered again).
Writes bench/results/web.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests.web.harness: the server and browser the tests use

import benchlib  # noqa: E402
from picker import generate  # noqa: E402

from sessiond.client.cli import Context  # noqa: E402
from sessiond.client.cli.session_list import find_sessions  # noqa: E402
from sessiond.client.connection import Client  # noqa: E402
from sessiond.store.paths import sanitize  # noqa: E402
from sessiond.wire import messages as m  # noqa: E402
from tests.web.harness import WebServer, browser, wait_for  # noqa: E402

BIG_CWD = "/home/dev/long-conversation"
QUERY = "refactor flaky socket"


def long_conversation(root: Path, n: int) -> str:
    """A session of ``n`` messages (prompts and answers of a few lines, a tool call every tenth answer)."""
    project = root / "projects" / sanitize(BIG_CWD)
    project.mkdir(parents=True)
    sid = str(uuid.uuid4())
    lines, parent = [], None
    for i in range(n):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(1767225600 + 10 * i))
        uid = str(uuid.uuid4())
        if i % 2 == 0:
            msg = {"role": "user", "content": f"Step {i}: look at module {i % 37} and tell me what the parser does there."}
        else:
            content = [{"type": "text", "text": f"Answer {i}.\n" + "The parser reads tokens one at a time. " * 6}]
            if i % 20 == 1:
                content.append({"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"file_path": f"/src/m{i}.py"}})
            msg = {"role": "assistant", "id": f"msg_{i}", "content": content}
        lines.append(json.dumps({"type": msg["role"], "uuid": uid, "parentUuid": parent, "sessionId": sid,
                                 "cwd": BIG_CWD, "timestamp": stamp, "message": msg}))
        parent = uid
    (project / f"{sid}.jsonl").write_text("\n".join(lines) + "\n")
    return sid


def first_byte(s: WebServer, path: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    try:
        t = time.perf_counter()
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{s.port}", "Cookie": f"sessiond_web_{s.port}={s.token}"})
        resp = conn.getresponse()
        took = time.perf_counter() - t
        assert resp.status == 200, (path, resp.status)
        resp.read()
        return took
    finally:
        conn.close()


def med(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--messages", type=int, default=1_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "web.json"))
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sdw-", dir="/tmp"))
    os.chmod(base, 0o700)
    root, sock = base / "root", base / "run" / "sessiond.sock"
    generate(root, args.sessions)
    big = long_conversation(root, args.messages)
    env = {**os.environ, "SESSIOND_ROOT": str(root), "SESSIOND_SOCKET": str(sock)}
    daemon = benchlib.start_daemon(sock, root)
    server = driver = None
    out: dict = {"sessions": args.sessions, "messages": args.messages, "runs": args.runs}
    try:
        client = Client(sock, root=root, autostart=False, timeout=600).connect()
        client.call(m.Reindex(id=client.next_id(), all=True))
        server = WebServer(env)
        driver = browser(base / "profile")
        driver.get(server.url)
        paths = {"conversation": f"/s/{big}", "projects": "/", "sessions": "/sessions",
                 "stylesheet (baseline)": "/static/style.css"}
        out["first_byte_ms"] = {k: med([first_byte(server, p) for _ in range(args.runs)]) for k, p in paths.items()}
        obj = Context(root=root, socket=sock, autostart=False)
        listed = []
        for _ in range(args.runs):
            t = time.perf_counter()
            find_sessions(obj, None, True)
            listed.append(time.perf_counter() - t)
        out["list_every_session_baseline_ms"] = med(listed)

        rendered = []
        for _ in range(args.runs):
            t = time.perf_counter()
            driver.get(server.origin + f"/s/{big}")
            wait_for(driver, lambda c: c.execute_script("return document.readyState") == "complete")
            rendered.append(time.perf_counter() - t)
        out["conversation_in_browser_ms"] = med(rendered)
        out["conversation_turns"] = driver.execute_script("return document.querySelectorAll('#conversation .turn').length")

        prefixes = [QUERY[:i] for i in range(3, len(QUERY) + 1) if not QUERY[:i].endswith(" ")]
        api = [statistics.median([first_byte(server, "/api/search?q=" + p.replace(" ", "+")) for _ in range(args.runs)])
               for p in prefixes]
        out["search_api_ms"] = {"median": med(api), "worst": max(api) * 1e3, "prefixes": len(prefixes)}
        daemon_search = []
        for _ in range(args.runs):
            t = time.perf_counter()
            client.call(m.Search(id=client.next_id(), query=QUERY, all=True, limit=20))
            daemon_search.append(time.perf_counter() - t)
        out["search_daemon_baseline_ms"] = med(daemon_search)
        keys = []
        for _ in range(args.runs):
            driver.get(server.origin + "/")
            box = wait_for(driver, lambda c: c.find_element("id", "q"))
            for n, ch in enumerate(QUERY, start=1):
                t = time.perf_counter()
                box.send_keys(ch)
                if len(QUERY[:n].strip()) < 3:
                    continue
                wait_for(driver, lambda c, n=n: c.execute_script("return document.body.dataset.searched") == str(n), 60)
                keys.append(time.perf_counter() - t)
        out["search_keystroke_in_browser_ms"] = med(keys)

        live_sid = str(uuid.uuid4())
        writer = client.session(live_sid, cwd=BIG_CWD)
        writer.append({"type": "user", "uuid": str(uuid.uuid4()), "sessionId": live_sid, "cwd": BIG_CWD,
                       "message": {"role": "user", "content": "start"}}, "written")
        driver.get(server.origin + f"/s/{live_sid}")
        wait_for(driver, lambda c: c.execute_script("return document.body.dataset.live") == "daemon")
        driver.execute_script("""
            window.__seen = {}; window.__events = [];
            new MutationObserver(() => {
              const t = document.getElementById('conversation').textContent;
              for (const m of t.matchAll(/livemark(\\d+)/g)) if (!(m[1] in window.__seen)) window.__seen[m[1]] = Date.now();
            }).observe(document.getElementById('conversation'), {childList: true, subtree: true});
            const es = new EventSource(document.getElementById('conversation').dataset.events);
            es.addEventListener('changed', () => window.__events.push(Date.now()));""")
        time.sleep(1.0)
        events, dom = [], []
        for i in range(max(args.runs, 10)):
            before = len(driver.execute_script("return window.__events"))
            entry = {"type": "assistant", "uuid": str(uuid.uuid4()), "sessionId": live_sid, "cwd": BIG_CWD,
                     "message": {"role": "assistant", "id": f"msg_live{i}", "content": [{"type": "text", "text": f"livemark{i}"}]}}
            writer.append(entry, "written")  # returns at the daemon's ack: the entry is in the file
            acked = time.time() * 1e3
            seen = wait_for(driver, lambda c, i=i: c.execute_script(f"return window.__seen['{i}']"), 30)
            stamps = wait_for(driver, lambda c, b=before: (lambda e: e if len(e) > b else None)(c.execute_script("return window.__events")), 30)
            events.append(stamps[before] - acked)
            dom.append(seen - acked)
            time.sleep(0.3)
        out["live_event_ms"] = statistics.median(events)
        out["live_in_page_ms"] = statistics.median(dom)
        client.close()
    finally:
        if driver is not None:
            driver.quit()
        if server is not None:
            server.stop()
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(base, ignore_errors=True)
    benchlib.save(args.out, out)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
