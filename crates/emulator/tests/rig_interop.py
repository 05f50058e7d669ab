"""Drives volley's board emulator with rig 2.4.1, the real SpiNNaker host library.

Usage: rig_interop.py PORT SEED [--lossy]

Writes 1 MiB through MachineController (window 1) and 1 MiB through SCPConnection
(window 8), reads both back and compares byte for byte. With --lossy (the emulator sits
behind volley's link simulator dropping 10% each way) rig gets a short timeout and more
tries, as a user on a lossy link would configure it. Exits non-zero on any mismatch.
"""
import inspect
import random
import sys

# rig 2.4.1 predates CPython 3.11, which removed inspect.getargspec.
inspect.getargspec = lambda f: tuple(inspect.getfullargspec(f))[:4]

from rig.machine_control import MachineController  # noqa: E402
from rig.machine_control.scp_connection import SCPConnection  # noqa: E402

SIZE = 1 << 20
BASE = 0x60000000


def pattern(seed):
    rng = random.Random(seed)
    return bytes(rng.getrandbits(8) for _ in range(SIZE))


def main():
    port = int(sys.argv[1])
    seed = int(sys.argv[2])
    lossy = "--lossy" in sys.argv[3:]
    tries = dict(n_tries=30, timeout=0.02) if lossy else {}

    mc = MachineController("127.0.0.1", scp_port=port, **tries)
    assert mc.scp_window_size == 1  # MachineController hard-wires window 1
    first = pattern(seed)
    mc.write(BASE, first, 1, 2, 3)
    back = mc.read(BASE, SIZE, 1, 2, 3)
    assert back == first, "MachineController read back differs"
    print("machine-controller ok", flush=True)

    conn = SCPConnection("127.0.0.1", port=port, **tries)
    second = pattern(seed + 1)
    conn.write(256, 8, 0, 0, 0, BASE + SIZE, second)
    back = conn.read(256, 8, 0, 0, 0, BASE + SIZE, SIZE)
    assert back == second, "SCPConnection (window 8) read back differs"
    # And what MachineController wrote, read through the windowed path.
    assert conn.read(256, 8, 1, 2, 3, BASE, SIZE) == first
    print("scp-connection ok", flush=True)


if __name__ == "__main__":
    main()
