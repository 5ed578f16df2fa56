"""``sessiond web`` in a real headless Chromium (selenium + chromedriver) and
over plain HTTP: a real daemon process, a real web server process, real
sockets. The pages show the store; search as you type finds a session; a
conversation an agent is writing updates without a reload; a hostile
transcript runs nothing; a request without the token or with another Host is
refused; with no daemon the files are served, and followed live."""

from __future__ import annotations

import html
import http.client
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import assistant, line, main_path, user
from tests.web.harness import CHROMEDRIVER, CHROMIUM, WAIT, WebServer, browser, wait_for

CWD = "/work/webproj"
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'

browser_needed = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                    reason="chromium and chromium-driver not installed (.ci/run installs them)")
pytestmark = pytest.mark.timeout(180)


def _append(d, sid: str, entries: list[dict], cwd: str = CWD, *flags: str) -> None:
    parent = None
    for e in entries:
        if e.get("type") in ("user", "assistant"):
            e.setdefault("parentUuid", parent)
            e.setdefault("sessionId", sid)
            e.setdefault("cwd", cwd)
            parent = e["uuid"]
    d.cli(*flags, "append", "--cwd", cwd, "--session", sid, input=b"\n".join(line(e) for e in entries))


def _spent(text: str, ts: str, msg_id: str) -> dict:
    """An assistant answer with usage, as Claude Code records one (so the session has tokens and a cost)."""
    e = assistant(text, timestamp=ts)
    e["message"] |= {"id": msg_id, "model": "claude-sonnet-4-5-20250929",
                     "usage": {"input_tokens": 1200, "output_tokens": 340, "cache_read_input_tokens": 5000,
                               "cache_creation_input_tokens": 800}}
    e["requestId"] = f"req_{msg_id}"
    e["version"] = "2.0.14"
    return e


def _seed(d) -> dict[str, str]:
    """Two sessions (one with a fork) with usage on two days; their ids and a message uuid."""
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    first = user("How do I parse the quarterly ledger?", timestamp="2026-03-01T09:00:00.000Z")
    _append(d, a, [{"type": "custom-title", "customTitle": "Ledger parsing", "sessionId": a}, first,
                   _spent("Use the streaming reader: zanzibarite tokens first.", "2026-03-01T09:00:05.000Z", "msg_a1")])
    _append(d, b, [user("Refactor the billing module", timestamp="2026-03-02T11:00:00.000Z"),
                   _spent("Billing refactored into three parts.", "2026-03-02T11:00:09.000Z", "msg_b1")])
    fork = d.cli("fork", a, "--json").stdout
    return {"a": a, "b": b, "first": first["uuid"], "fork": json.loads(fork)["sessionId"] if fork.strip().startswith(b"{") else fork.decode().strip()}


@pytest.fixture
def web(daemon_factory, short_tmp, monkeypatch) -> Iterator:
    cfg = short_tmp / "config.toml"
    cfg.write_text("search_refresh_s = 0\n")  # a search sees what was just written
    monkeypatch.setenv("SESSIOND_CONFIG", str(cfg))
    d = daemon_factory().start()
    servers: list[WebServer] = []

    def start(*args: str) -> WebServer:
        s = WebServer(d.env, *args)
        servers.append(s)
        return s

    yield d, start
    for s in servers:
        s.stop()


@pytest.fixture
def chrome(short_tmp):
    driver = browser(short_tmp / "profile")
    try:
        yield driver
    finally:
        driver.quit()


def _no_foreign_requests(driver, origin: str) -> None:
    names = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert all(n.startswith(origin + "/") for n in names), names


@browser_needed
def test_pages_render_with_content(web, chrome):
    d, start = web
    ids = _seed(d)
    s = start()
    chrome.get(s.url)  # the token once: a redirect sets the cookie and drops it from the address bar
    assert chrome.current_url == s.origin + "/"
    wait_for(chrome, lambda c: "webproj" in c.find_element("css selector", "table.list").text)
    assert "3" in chrome.find_element("css selector", "table.list tbody tr").text  # 3 sessions
    chrome.find_element("css selector", "table.list a").click()
    rows = wait_for(chrome, lambda c: c.find_elements("css selector", "table.list tbody tr"))
    text = [r.text for r in rows]
    assert any("Ledger parsing" in t for t in text) and any("Refactor the billing module" in t for t in text)
    fork_rows = chrome.find_elements("css selector", "tr.fork-1")
    assert len(fork_rows) == 1, text  # the fork, right under its origin
    origin_row = rows[[r.get_attribute("class") for r in rows].index("fork-1") - 1]
    assert ids["a"][:8] in origin_row.text
    # tokens and cost of each answer (the daemon counts the response the fork copied once, as ccusage does)
    assert sum("7.3k" in t and "$0.0" in t for t in text) == 2
    # One conversation: its messages, a deep link per message, the commands that resume it.
    chrome.get(f"{s.origin}/s/{ids['a']}#m-{ids['first']}")
    wait_for(chrome, lambda c: "zanzibarite" in c.find_element("id", "conversation").text)
    target = chrome.find_element("id", f"m-{ids['first']}")
    assert "quarterly ledger" in target.text
    assert chrome.execute_script("return document.querySelector(':target') && document.querySelector(':target').id") \
        == f"m-{ids['first']}"
    resume = chrome.find_element("css selector", "p.resume").text
    assert f"claude --resume {ids['a']}" in resume and f"sessiond resume {ids['a']}" in resume
    assert f"cd {CWD} && claude --resume" in resume
    wait_for(chrome, lambda c: c.find_element("id", "live-state").text.startswith("live"))
    # Usage over time: a bar per day with usage.
    chrome.get(s.origin + "/usage")
    bars = wait_for(chrome, lambda c: c.find_elements("css selector", "svg.chart rect"))
    assert len(bars) == 2
    assert "2026-03-01" in chrome.find_element("css selector", "table.list").text
    _no_foreign_requests(chrome, s.origin)


@browser_needed
def test_search_as_you_type_finds_a_session(web, chrome):
    d, start = web
    ids = _seed(d)
    s = start()
    chrome.get(s.url)
    box = wait_for(chrome, lambda c: c.find_element("id", "q"))
    for ch in "zanzib":  # typed a key at a time, as a person types: the word not finished yet
        box.send_keys(ch)
    hit = wait_for(chrome, lambda c: next((li for li in c.find_elements("css selector", "#results li")
                                           if "Ledger parsing" in li.text), None))
    link = hit.find_element("css selector", "a").get_attribute("href")
    assert link.startswith(f"{s.origin}/s/{ids['a']}#m-") or link.startswith(f"{s.origin}/s/{ids['fork']}#m-")
    assert hit.find_element("css selector", "mark").text.lower().startswith("zanzib")
    assert "sessiond resume" in hit.text
    hit.find_element("css selector", "a").click()
    wait_for(chrome, lambda c: "zanzibarite" in c.find_element("id", "conversation").text)


@browser_needed
def test_a_live_session_updates_without_a_reload(web, chrome):
    d, start = web
    sid = str(uuid.uuid4())
    _append(d, sid, [user("Start the long job", timestamp="2026-03-03T08:00:00.000Z")])
    s = start()
    chrome.get(s.url)
    chrome.get(f"{s.origin}/s/{sid}")
    wait_for(chrome, lambda c: c.execute_script("return document.body.dataset.live") == "daemon")
    chrome.execute_script("window.__same_page = 42")
    for n in range(3):  # an agent writing, one answer at a time, through the daemon
        _append(d, sid, [assistant(f"progress report number {n}", timestamp=f"2026-03-03T08:00:0{n + 1}.000Z")])
        wait_for(chrome, lambda c, n=n: f"progress report number {n}" in c.find_element("id", "conversation").text)
    assert chrome.execute_script("return window.__same_page") == 42  # updated in place, never reloaded
    assert int(chrome.execute_script("return document.body.dataset.updates")) >= 1


@browser_needed
def test_a_hostile_transcript_executes_nothing(web, chrome):
    d, start = web
    sid = str(uuid.uuid4())
    cwd = f"/work/{HOSTILE.replace('/', '_')}"
    _append(d, sid, [
        {"type": "custom-title", "customTitle": f"title {HOSTILE}", "sessionId": sid},
        user(f"prompt {HOSTILE} quokkafish", timestamp="2026-03-04T10:00:00.000Z"),
        {**assistant("", timestamp="2026-03-04T10:00:01.000Z"), "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": f"Read{HOSTILE}", "input": {"file_path": f"/src/{HOSTILE}.py"}}]}},
        user("", timestamp="2026-03-04T10:00:02.000Z", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": f"result {HOSTILE}"}]}),
    ], cwd)
    d.cli("flush")
    agent = "<img src=x onerror=window.__pwned=1>"  # a file name: no slash
    subagents = main_path(d.root, cwd, sid).parent / sid / "subagents"
    subagents.mkdir(parents=True)
    (subagents / f"agent-{agent}.jsonl").write_bytes(line(assistant(
        f"subagent says {HOSTILE}", sessionId=sid, isSidechain=True, agentId=agent, timestamp="2026-03-04T10:00:03.000Z")) + b"\n")
    s = start()
    chrome.get(s.url)

    def clean(page: str) -> None:
        assert chrome.execute_script("return window.__pwned") is None, page
        scripts = chrome.execute_script("return Array.from(document.scripts).map(s => s.src)")
        assert scripts == [s.origin + "/static/app.js"], (page, scripts)
        assert chrome.find_elements("css selector", "img") == [], page

    for page in ("/", "/sessions", f"/s/{sid}"):
        chrome.get(s.origin + page)
        wait_for(chrome, lambda c: "<script>window.__pwned=1" in c.find_element("tag name", "body").text)  # shown as text
        clean(page)
    for el in chrome.find_elements("css selector", "details"):
        chrome.execute_script("arguments[0].open = true", el)  # the tool call and result, shown
    body = chrome.find_element("tag name", "body").text
    assert f"Subagent {agent}" in body and f"subagent says {HOSTILE}" in body
    assert f"result {HOSTILE}" in body and "/src/<script>window.__pwned=1</script><img src=x onerror=" in body and f"title {HOSTILE}" in body
    clean("opened")
    chrome.find_element("id", "q").send_keys("quokkafish")
    wait_for(chrome, lambda c: any("quokkafish" in li.text for li in c.find_elements("css selector", "#results li")))
    assert HOSTILE in chrome.find_element("id", "results").text
    clean("search")
    # The check can fail: markup the server let through would run.
    raw = s.get(f"/s/{sid}")[2].decode()
    assert "<script>window.__pwned" not in raw and "onerror=\"window" not in raw


def test_requests_without_the_token_or_with_a_foreign_host_are_refused(web):
    d, start = web
    s = start()
    status, headers, _ = s.get("/")
    assert status == 200
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert s.get(f"/?token={s.token}", host=f"localhost:{s.port}", cookie=False)[0] == 303
    for path in ("/", "/sessions", "/static/app.js", "/api/search?q=x", f"/s/{uuid.uuid4()}/events"):
        status, headers, body = s.get(path, cookie=False)
        assert status == 403, path
        assert "content-security-policy" in headers  # a refusal carries the headers too
        assert s.get(path, headers={"Cookie": f"sessiond_web_{s.port}={'x' * len(s.token)}"}, cookie=False)[0] == 403
        assert s.get(f"{path}{'&' if '?' in path else '?'}token=wrong", cookie=False)[0] == 403
    for host in ("evil.example", f"evil.example:{s.port}", f"127.0.0.1:{s.port + 1}", "127.0.0.1", ""):
        assert s.get("/", host=host)[0] == 400, host  # DNS rebinding: the token alone does not let it in
    assert s.get("/", host=f"localhost:{s.port}")[0] == 200
    assert s.get("/", method="POST")[0] == 405
    # The token given once: a redirect to the same page without it, and an HttpOnly SameSite=Strict cookie.
    status, headers, _ = s.get(f"/sessions?page=2&token={s.token}", cookie=False)
    assert status == 303 and headers["location"] == "/sessions?page=2"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"sessiond_web_{s.port}={s.token};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie


@browser_needed
def test_the_browser_without_the_token_is_refused(web, chrome):
    d, start = web
    s = start()
    chrome.get(s.origin + "/")
    assert "forbidden" in chrome.find_element("tag name", "body").text
    chrome.get(s.url)
    assert chrome.current_url == s.origin + "/"
    assert "Projects" in chrome.find_element("tag name", "h1").text


class Events:
    """One event stream of the server, read over a plain HTTP connection."""

    def __init__(self, s: WebServer, sid: str, offset: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=WAIT)
        self.conn.request("GET", f"/s/{sid}/events?offset={offset}",
                          headers={"Host": f"127.0.0.1:{s.port}", "Cookie": f"sessiond_web_{s.port}={s.token}"})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status

    def next(self) -> tuple[str, str]:
        name = data = ""
        while True:
            raw = self.resp.readline()
            assert raw, "the stream ended"
            text = raw.decode().rstrip("\n")
            if text.startswith("event: "):
                name = text[7:]
            elif text.startswith("data: "):
                data = text[6:]
            elif not text and name:
                return name, data

    def close(self) -> None:
        self.resp.close()
        self.conn.close()


def test_without_a_daemon_the_files_are_served_and_followed(web):
    d, start = web
    ids = _seed(d)
    assert b"Ledger parsing" in d.cli("search", "--all", "zanzibarite").stdout  # indexed before the daemon goes
    d.stop()
    s = start()
    status, _, body = s.get("/sessions")
    assert status == 200 and b"Ledger parsing" in body
    status, _, body = s.get(f"/s/{ids['a']}")
    assert status == 200 and b"zanzibarite" in body
    status, _, body = s.get("/api/search?q=zanzibarite")
    assert status == 200 and ids["a"] in {h["sessionId"] for h in json.loads(body)["hits"]}
    assert s.get("/usage")[0] == 200
    resp = Events(s, ids["b"], 0)
    assert resp.status == 200
    assert resp.next() == ("ready", "file")
    assert resp.next()[0] == "changed"  # the page's offset 0 is behind the file
    _append(d, ids["b"], [assistant("written with no daemon")], CWD, "--no-autostart")
    assert resp.next() == ("changed", "file")
    resp.close()


def test_live_streams_are_bounded(web):
    d, start = web
    sid = str(uuid.uuid4())
    _append(d, sid, [user("hello")])
    s = start("--max-streams", "2")
    held = [Events(s, sid, 0) for _ in range(2)]
    for resp in held:
        assert resp.status == 200 and resp.next() == ("ready", "daemon")
    refused = Events(s, sid, 0)
    assert refused.status == 503
    refused.close()
    held.pop().close()  # a closed stream gives its place back (noticed at its next write)
    _append(d, sid, [assistant("one more")])
    for _ in range(400):  # bounded: 20 s at most
        again = Events(s, sid, 0)
        again.close()
        if again.status == 200:
            break
        time.sleep(0.05)
    assert again.status == 200
    for resp in held:
        resp.close()


def test_a_session_that_is_not_there_is_a_404(web):
    d, start = web
    s = start()
    assert s.get(f"/s/{uuid.uuid4()}")[0] == 404
    assert s.get("/s/..%2F..%2Fetc%2Fpasswd")[0] == 404
    assert s.get("/s/not-an-id/events")[0] == 404


def test_a_port_in_use_or_a_missing_root_is_one_line(web):
    import socket

    d, _ = web
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = d.cli("web", "--port", str(port), check=False, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.decode() == f"sessiond: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    proc = d.cli("--root", str(d.base / "nowhere"), "web", check=False, timeout=30)
    assert proc.returncode == 1 and proc.stderr.decode().startswith("sessiond: no store at ") and proc.stdout == b""


def test_a_project_page_lists_that_project_only_with_or_without_a_daemon(web):
    from sessiond.store.paths import sanitize

    d, start = web
    _append(d, str(uuid.uuid4()), [user("alpha session of one project")], "/work/alpha")
    _append(d, str(uuid.uuid4()), [user("beta session of another")], "/work/beta")
    d.cli("flush")
    s = start()
    for _ in range(2):
        status, _, body = s.get(f"/sessions?project={sanitize('/work/alpha')}")
        assert status == 200 and b"alpha session" in body and b"beta session" not in body
        status, _, body = s.get("/sessions")
        assert b"alpha session" in body and b"beta session" in body
        d.stop()  # the second time round: read from the files
    for bad in ("..", "nope", "-work-alpha%2F..", ""):
        assert s.get(f"/sessions?project={bad}")[0] == (200 if bad == "" else 404), bad


def test_the_sessions_list_is_paged(daemon_factory):
    from sessiond.store.paths import sanitize

    d = daemon_factory()
    project = d.root / "projects" / sanitize(CWD)
    project.mkdir(parents=True)
    for i in range(120):  # written as Claude Code writes them, the daemon catalogs them at start
        sid = str(uuid.uuid4())
        stamp = f"2026-02-01T10:{i // 60:02d}:{i % 60:02d}.000Z"
        (project / f"{sid}.jsonl").write_bytes(line(user(f"paged session {i:03d}", sessionId=sid, cwd=CWD, timestamp=stamp)) + b"\n")
    d.start()
    s = WebServer(d.env)
    try:
        seen: list[bytes] = []
        for page, rows in ((1, 50), (2, 50), (3, 20)):
            status, _, body = s.get(f"/sessions?page={page}")
            assert status == 200 and f"page {page} of 3".encode() in body
            titles = re.findall(rb"paged session (\d{3})", body)
            assert len(titles) == rows
            seen += titles
            assert (b'rel="next"' in body) == (page < 3) and (b'rel="prev"' in body) == (page > 1)
        assert seen == [f"{i:03d}".encode() for i in range(119, -1, -1)]  # newest first, each once
        assert b"page 3 of 3" in s.get("/sessions?page=99")[2] and b"page 1 of 3" in s.get("/sessions?page=x")[2]
    finally:
        s.stop()


def test_times_are_shown_as_list_shows_them(daemon_factory):
    """The page's LAST ACTIVE is the CLI's listing time (``output.when``), in the
    local zone of the user running it, not the file's UTC."""
    from sessiond.store.paths import sanitize

    d = daemon_factory()
    project = d.root / "projects" / sanitize(CWD)
    project.mkdir(parents=True)
    sid = str(uuid.uuid4())
    entry = user("a zoned session", sessionId=sid, cwd=CWD, timestamp="2026-02-01T10:00:00.000Z")
    (project / f"{sid}.jsonl").write_bytes(line(entry) + b"\n")
    d.start()
    s = WebServer({**d.env, "TZ": "Asia/Kathmandu"})  # +05:45
    try:
        body = s.get("/sessions")[2].decode()
        listed = d.cli("list", "--all", env={**d.env, "TZ": "Asia/Kathmandu"}).stdout.decode()
        assert "2026-02-01 15:45" in body and "2026-02-01 10:00" not in body
        assert "2026-02-01 15:45" in listed
    finally:
        s.stop()


def _location(s: WebServer, target: str) -> tuple[int, str]:
    """The status and Location of ``target`` asked with the token (the sign-in redirect)."""
    status, headers, _ = s.get(target, cookie=False)
    return status, headers.get("location", "")


def test_secrets_are_redacted_as_export_redacts_them(web):
    from sessiond.secrets import fingerprint
    from tests.secrets.fakes import fakes

    d, start = web
    github, stripe = fakes(7)[3].value, fakes(7)[12].value  # a GitHub token, a Stripe live key
    sid = str(uuid.uuid4())
    _append(d, sid, [{"type": "custom-title", "customTitle": f"deploy {github}", "sessionId": sid},
                     user(f"STRIPE_KEY={stripe} in the .env", timestamp="2026-03-05T10:00:00.000Z"),
                     assistant("Rotate that key.", timestamp="2026-03-05T10:00:01.000Z")])
    d.cli("flush")
    exported = d.cli("export", sid, "--cwd", CWD, "--format", "html").stdout.decode()
    marks = (f"[REDACTED:github-token:{fingerprint(github)}]", f"[REDACTED:stripe-secret-key:{fingerprint(stripe)}]")
    assert all(m in exported for m in marks)
    s = start()
    from sessiond.store.paths import sanitize

    for page in (f"/s/{sid}", f"/s/{sid}/body", "/sessions", f"/sessions?project={sanitize(CWD)}"):
        status, _, body = s.get(page)
        text = body.decode()
        assert status == 200 and github not in text and stripe not in text, page
        assert marks[0] in text, page  # the title, in the listing too
    assert marks[1] in s.get(f"/s/{sid}")[2].decode()


def _raw_project(root, name: bytes, sid: str, prompt: str, cwd: str | None = CWD) -> None:
    """A session file written as Claude Code writes one, in the project dir ``name`` (bytes)."""
    import os

    project = os.path.join(os.fsencode(root), b"projects", name)
    os.makedirs(project)
    with open(os.path.join(project, f"{sid}.jsonl".encode()), "wb") as f:
        f.write(line(user(prompt, sessionId=sid, cwd=cwd, timestamp="2026-02-01T10:00:00.000Z")) + b"\n")


def test_a_project_dir_whose_name_is_not_utf8_is_listed_and_linked(daemon_factory):
    d = daemon_factory()
    sid = str(uuid.uuid4())
    _raw_project(d.root, b"-proj\xff", sid, "a session in a latin-1 dir", cwd=None)  # the name is shown
    d.start()
    s = WebServer(d.env)
    try:
        for _ in range(2):
            status, _, body = s.get("/")
            assert status == 200, body
            links = re.findall(r'href="(/sessions\?project=[^"]*)"', body.decode())
            assert links == ["/sessions?project=-proj%FF"]
            status, _, body = s.get(links[0])
            assert status == 200 and b"a session in a latin-1 dir" in body
            assert b"<h1>-proj\\xff</h1>" in body  # the byte shown as the CLI shows it
            d.stop()  # the second time round: read from the files
        assert s.get("/sessions?project=-proj%FE")[0] == 404
        # the sign-in redirect keeps the name's bytes
        assert _location(s, f"/sessions?project=-proj%FF&token={s.token}") == (303, "/sessions?project=-proj%FF")
    finally:
        s.stop()


def test_a_project_name_too_long_for_the_file_system_is_a_404(web):
    d, start = web
    _append(d, str(uuid.uuid4()), [user("one session")])
    s = start()
    for name in ("a" * 300, "a" * 5000, "%ED%A0%80"):  # ENAMETOOLONG, and a lone surrogate no name can be
        status, _, body = s.get(f"/sessions?project={name}")
        assert status == 404 and b"no project dir" in body, name
    assert s.get("/")[0] == 200


def test_an_event_stream_offset_out_of_range_is_refused(web):
    d, start = web
    sid = str(uuid.uuid4())
    _append(d, sid, [user("hello")])
    s = start()
    for offset in (2**64, 2**63, 10**300):
        status, _, body = s.get(f"/s/{sid}/events?offset={offset}")
        assert status == 400 and b"offset" in body, offset
    assert s.proc.poll() is None
    resp = Events(s, sid, 2**63 - 1)  # the largest offset: a stream (the file is behind it)
    assert resp.status == 200 and resp.next()[0] == "ready"
    resp.close()
    assert s.proc.poll() is None
    assert b"Traceback" not in _stderr_so_far(s)


def _stderr_so_far(s: WebServer) -> bytes:
    """What the server wrote on stderr so far (read without waiting)."""
    import os
    import select

    assert s.proc.stderr is not None
    out = b""
    while select.select([s.proc.stderr], [], [], 0)[0]:
        chunk = os.read(s.proc.stderr.fileno(), 65536)
        if not chunk:
            break
        out += chunk
    return out


def test_the_sign_in_redirect_stays_on_this_server(web):
    d, start = web
    s = start()
    t = s.token
    cases = {
        f"//evil.example/?token={t}": "/evil.example/",
        f"///evil.example?token={t}": "/evil.example",
        f"/%2F%2Fevil.example?token={t}": "/evil.example",
        f"/\\evil.example?token={t}": "/evil.example",
        f"/%5C%5Cevil.example?token={t}": "/evil.example",
        f"/s/a\\b?token={t}": "/s/a%5Cb",
        f"/%0d%0aX:y?token={t}": "/%0D%0AX:y",
        f"/%00?token={t}": "/%00",
        f"/s/a%25b?x=%0d%0a&token={t}": "/s/a%25b?x=%0D%0A",
        f"/sessions?page=2&token={t}": "/sessions?page=2",
    }
    for target, expected in cases.items():
        assert _location(s, target) == (303, expected), target
    assert s.get("/")[0] == 200  # the server still answers
    assert b"Traceback" not in _stderr_so_far(s)


def test_resume_commands_name_the_canonical_id_and_show_controls(daemon_factory):
    from sessiond.store.paths import sanitize

    d = daemon_factory()
    sid = str(uuid.uuid4())
    _raw_project(d.root, sanitize(CWD).encode(), sid, "plain session")
    hostile_cwd = "/work/\u202eevil\x1b[2Jdir"
    other = str(uuid.uuid4())
    _raw_project(d.root, b"-work-hostile", other, "hostile \u202ecwd\x1b[31m prompt", cwd=hostile_cwd)
    d.start()
    s = WebServer(d.env)
    try:
        status, _, body = s.get(f"/s/%7B{sid.upper()}%7D")
        text = body.decode()
        assert status == 200
        resume = re.search(r'<p class="resume">.*?</p>', text).group(0)
        assert f"claude --resume {sid}" in resume and f'data-copy="sessiond resume {sid}"' in resume
        assert "{" not in resume and sid.upper() not in resume
        status, _, body = s.get(f"/s/{other}")
        text = body.decode()
        resume = re.search(r'<p class="resume">.*?</p>', text).group(0)
        assert "\u202e" not in resume and "\x1b" not in resume
        assert "\u202e" not in text and "\x1b" not in text  # the conversation too (the prompt), as export shows it
        copies = [html.unescape(c) for c in re.findall(r'data-copy="([^"]*)"', resume)]
        assert copies[1] == f"sessiond resume {other}" and len(copies) == 2, copies
        word = copies[0].removeprefix("cd ").removesuffix(f" && claude --resume {other}")
        assert "\\xe2\\x80\\xaeevil\\x1b[2Jdir" in word and html.escape(word) in resume  # shown as copied
        done = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True, timeout=30)
        assert done.stdout == hostile_cwd.encode()  # and it names exactly that directory
        listing = s.get("/")[2].decode()
        assert "\u202e" not in listing and "\x1b" not in listing and "\\u202eevil^[[2Jdir" in listing
    finally:
        s.stop()


def test_a_conversation_larger_than_a_page_renders_is_a_note_naming_the_export(web):
    from sessiond.client.web.conversation import MAX_RENDER_BYTES

    d, start = web
    sid = str(uuid.uuid4())
    _append(d, sid, [{"type": "custom-title", "customTitle": "The huge one", "sessionId": sid},
                     user("first words of a huge session", timestamp="2026-03-06T10:00:00.000Z")])
    d.cli("flush")
    with open(main_path(d.root, CWD, sid), "ab") as f:  # a tool result as large as a page may render, and more
        f.write(line(user("bulk " + "x" * MAX_RENDER_BYTES, timestamp="2026-03-06T10:00:01.000Z", sessionId=sid)) + b"\n")
    s = start()
    for page in (f"/s/{sid}", f"/s/{sid}/body"):
        status, _, body = s.get(page)
        text = body.decode()
        assert status == 200 and len(body) < 100_000, page
        assert "first words" not in text and "more than the web view renders on one page" in text, page
        assert f"sessiond export {sid} --format html" in text and "The huge one" in text, page


def test_open_gives_the_browser_a_private_page_never_the_token(daemon_factory, short_tmp):
    """``--open``: a browser's command line is any local user's to read, and the
    token is the view's one protection from them; the browser is given a 0600
    page (in a 0700 dir) that sends it on, removed once the browser signed in."""
    d = daemon_factory().start()
    record = short_tmp / "browser.json"
    browser = short_tmp / "browser.py"
    # the record is written aside and renamed into place: the test never reads it half written
    browser.write_text(f"import json, os, sys, pathlib\nu = sys.argv[1]\np = pathlib.Path(u.removeprefix('file://'))\n"
                       f"pathlib.Path({str(record) + '.part'!r}).write_text(json.dumps({{'argv': sys.argv[1:], 'page': p.read_text(),"
                       f" 'mode': os.stat(p).st_mode & 0o777, 'dir': os.stat(p.parent).st_mode & 0o777, 'path': str(p)}}))\n"
                       f"os.rename({str(record) + '.part'!r}, {str(record)!r})\n")
    browser.chmod(0o700)
    s = WebServer({**d.env, "BROWSER": f"{sys.executable} {browser} %s"}, "--open")
    try:
        deadline = time.monotonic() + 30
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        got = json.loads(record.read_text())
        assert s.token not in " ".join(got["argv"]) and got["argv"][0].startswith("file://")
        assert f'url=http://127.0.0.1:{s.port}/?token={s.token}"' in got["page"]
        assert got["mode"] == 0o600 and got["dir"] == 0o700 and Path(got["path"]).exists()
        assert s.get(f"/?token={s.token}", cookie=False)[0] == 303  # the browser signs in: the page has done its work
        assert not Path(got["path"]).exists()
    finally:
        s.stop()
