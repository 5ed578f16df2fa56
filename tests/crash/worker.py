"""A client process for the crash harness: appends entries to its own session
until told to stop, and logs every acknowledgement (uuid and level) to a file
AFTER the daemon acknowledged it. Survives daemon restarts by reconnecting.

    python tests/crash/worker.py SOCKET ROOT SESSION CWD ACKFILE [SIZE [TIMEOUT]]
"""

import json
import os
import signal
import sys
import uuid
from collections.abc import Callable

from sessiond.client import Client, Session

LEVELS = ("written", "queued", "durable", "queued")


def stop_requested() -> Callable[[], bool]:
    """SIGTERM asks the worker to finish what it is doing and stop."""
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    return lambda: stop[0]


def main() -> None:
    sock, root, sid, cwd, ackfile = sys.argv[1:6]
    size = int(sys.argv[6]) if len(sys.argv) > 6 else 300
    timeout = float(sys.argv[7]) if len(sys.argv) > 7 else 5.0
    stopping = stop_requested()
    client = Client(sock, root=root, autostart=False, timeout=timeout)
    session = Session(client, sid, cwd, reconnect_timeout=120)
    pad = "p" * size
    with open(ackfile, "a", buffering=1) as acks:
        print("ready", flush=True)
        i = 0
        while not stopping():
            level = LEVELS[i % len(LEVELS)]
            u = str(uuid.uuid4())
            entry = {"type": "user" if i % 2 == 0 else "assistant", "uuid": u, "sessionId": sid, "n": i,
                     "message": {"role": "user", "content": pad}}
            if i % 50 == 49:  # now and then an entry without a uuid
                u = f"title {os.getpid()} {i}"  # unique: a restarted worker counts from 0 again
                entry = {"type": "custom-title", "customTitle": u, "sessionId": sid}
            resp = session.append(entry, level)
            if resp is not None:
                acks.write(json.dumps([u, level]) + "\n")
            i += 1
        session.close(timeout=30)
    print("done", flush=True)


if __name__ == "__main__":
    main()
