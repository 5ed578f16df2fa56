"""A real ``sessiond web`` process and a real headless Chromium driving it
(Debian's ``chromium`` and ``chromium-driver``, through selenium): shared by
the web view's tests and its benchmark (bench/web.py)."""

from __future__ import annotations

import http.client
import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
START_TIMEOUT = 30.0
WAIT = 20.0
"""Seconds a test waits for a page to show what it expects."""


class WebServer:
    """A ``sessiond web --port 0`` process: its URL (with the token), port and token."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "web", "--port", "0", *args],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"sessiond web did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 1)
                if not chunk:
                    continue
                line += chunk
        found = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", line.decode())
        assert found, line
        self.url = found.group(0)
        self.port = int(found.group(1))
        self.token = found.group(2)
        self.origin = f"http://127.0.0.1:{self.port}"

    def get(self, path: str, *, host: str | None = None, cookie: bool = True, method: str = "GET",
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """One plain HTTP request (http.client, a real socket): status, headers (lowercased), body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            sent = {"Host": host if host is not None else f"127.0.0.1:{self.port}", **(headers or {})}
            if cookie:
                sent["Cookie"] = f"sessiond_web_{self.port}={self.token}"
            conn.request(method, path, headers=sent)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


def browser(profile: Path, width: int = 1280, height: int = 900):
    """A headless Chromium under chromedriver, its profile in ``profile``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    if CHROMIUM:
        opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-default-apps", f"--window-size={width},{height}",
                f"--user-data-dir={profile}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(WAIT * 3)
    driver.set_script_timeout(WAIT)
    return driver


def wait_for(driver, condition, timeout: float = WAIT):
    """``condition(driver)`` once truthy (selenium's WebDriverWait), else TimeoutException."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.02).until(condition)
