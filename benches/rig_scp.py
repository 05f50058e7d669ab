"""rig 2.4.1's windowed SCP (SCPConnection.write/read) timed on one transfer.

Usage: rig_scp.py PORT SIZE WINDOW
Prints one JSON line: {"write_s": .., "read_s": ..}. Exits non-zero if the data read back
differs from what was written.
"""
import inspect
import json
import os
import sys
import time

# rig 2.4.1 predates CPython 3.11, which removed inspect.getargspec.
inspect.getargspec = lambda f: tuple(inspect.getfullargspec(f))[:4]

from rig.machine_control.scp_connection import SCPConnection  # noqa: E402

BASE = 0x60000000


def main():
    port, size, window = (int(a) for a in sys.argv[1:4])
    data = os.urandom(size)
    conn = SCPConnection("127.0.0.1", port=port)
    start = time.perf_counter()
    conn.write(256, window, 0, 0, 0, BASE, data)
    wrote = time.perf_counter()
    back = conn.read(256, window, 0, 0, 0, BASE, size)
    read = time.perf_counter()
    if back != data:
        sys.exit("rig read back differs from what it wrote")
    print(json.dumps({"write_s": wrote - start, "read_s": read - wrote}))


if __name__ == "__main__":
    main()
