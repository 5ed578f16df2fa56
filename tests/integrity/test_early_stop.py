"""A stop asked as soon as the socket answers (a service manager, a test) is a
clean stop: the daemon replays its spool before it serves, and a SIGTERM in that
window used to kill it with the default action (nothing drained, exit -15)."""

import signal
import subprocess
import sys
import time

from sessiond.client.autostart import socket_answers


def test_sigterm_right_after_the_socket_listens_is_a_clean_stop(short_tmp):
    codes = []
    for i in range(12):
        base = short_tmp / str(i)
        (base / "run").mkdir(parents=True, mode=0o700)
        sock = base / "run" / "s.sock"
        proc = subprocess.Popen([sys.executable, "-m", "sessiond.client.cli", "--root", str(base / "root"),
                                 "--socket", str(sock), "serve"], stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not socket_answers(sock):
            assert proc.poll() is None and time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        codes.append(proc.wait(timeout=20))
    assert codes == [0] * 12
