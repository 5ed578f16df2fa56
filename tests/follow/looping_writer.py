"""A foreign writer that keeps appending while the daemon starts: whole
lines, round-robin over the paths it is given (created on the first append),
until the stop file exists. Prints the number of lines it wrote."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid


def main() -> None:
    stop, paths = sys.argv[1], sys.argv[2:]
    n = 0
    while not os.path.exists(stop):
        path = paths[n % len(paths)]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "n": n,
                                     "message": {"role": "user", "content": f"line {n}"}}).encode() + b"\n")
        finally:
            os.close(fd)
        n += 1
        if n == 1:
            print("writing", flush=True)
        time.sleep(0.0005)
    print(n, flush=True)


if __name__ == "__main__":
    main()
