"""A crash-harness client that starts one NEW session after another, so daemon
kills land before, during and after materialization: each session gets
pre-message entries at every durability (titles, tags, a hook attachment),
then its first user message, an answer, and a close. Every acknowledgement is
logged AFTER the daemon gave it, as ``[session, key, level, held]`` (``held``:
sent before the session's first message).

    python tests/crash/session_worker.py SOCKET ROOT CWD ACKFILE [TIMEOUT]
"""

import json
import sys
import uuid

from worker import stop_requested  # this script's directory is on sys.path

from sessiond.client import Client, Session

LEVELS = ("queued", "written", "durable")


def main() -> None:
    sock, root, cwd, ackfile = sys.argv[1:5]
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
    stopping = stop_requested()
    client = Client(sock, root=root, autostart=False, timeout=timeout)
    with open(ackfile, "a", buffering=1) as acks:
        print("ready", flush=True)
        n = 0
        while not stopping():
            sid = str(uuid.uuid4())
            s = Session(client, sid, cwd, reconnect_timeout=120)

            def log(key: str, level: str, held: bool, resp) -> None:
                if resp is not None:
                    acks.write(json.dumps([sid, key, level, held]) + "\n")  # noqa: B023 (called within this iteration)

            for k, level in enumerate(LEVELS):
                title = f"title {sid[:8]} {k}"
                log(title, level, True, s.append({"type": "custom-title", "customTitle": title, "sessionId": sid}, level))
                tag = f"tag {sid[:8]} {k}"
                log(tag, level, True, s.append({"type": "tag", "tag": tag, "sessionId": sid}, level))
            hook = str(uuid.uuid4())
            log(hook, "durable", True, s.append({"type": "attachment", "uuid": hook, "sessionId": sid,
                                                 "attachment": {"type": "hook", "n": n}}, "durable"))
            for kind, level in (("user", "written"), ("assistant", "queued"), ("user", "durable")):
                u = str(uuid.uuid4())
                log(u, level, False, s.append({"type": kind, "uuid": u, "sessionId": sid,
                                               "message": {"role": kind, "content": f"{kind} {n}"}}, level))
            s.close(timeout=30)
            n += 1
    print("done", flush=True)


if __name__ == "__main__":
    main()
