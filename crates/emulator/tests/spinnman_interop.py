"""SpiNNMan 7.4.1's own Transceiver against an emulated machine: discovery, then writes
and read-backs to chips on every board, byte for byte, first through the root board as a
bare script sends them, then through each chip's own board, as SpiNNFrontEndCommon does
once the machine is in SpiNNMan's data view.

usage: spinnman_interop.py ROOT_IP BOARDS SEED
"""

import random
import sys
import time

from spinn_utilities.config_holder import set_config
from spinnman.config_setup import unittest_setup
from spinnman.data.spinnman_data_writer import SpiNNManDataWriter

root, boards, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
unittest_setup()
set_config("Machine", "version", "5")
writer = SpiNNManDataWriter.mock()

from spinnman.transceiver import create_transceiver_from_hostname  # noqa: E402

started = time.monotonic()
txrx = create_transceiver_from_hostname(root)
machine = txrx.get_machine_details()
txrx.discover_scamp_connections()
discovery = time.monotonic() - started

assert machine.n_chips == 48 * boards, (machine.n_chips, boards)
ethernets = sorted((c.x, c.y) for c in machine.ethernet_connected_chips)
assert len(ethernets) == boards, ethernets
ips = {c.ip_address for c in machine.ethernet_connected_chips}
assert len(ips) == boards, ips
connections = txrx._scamp_connections
assert len(connections) == boards + 1, [c.remote_ip_address for c in connections]


def check_every_board(rng, label):
    for ex, ey in ethernets:
        # The Ethernet chip and the board's chip farthest from it (P2P-forwarded).
        on_board = [c for c in machine.chips
                    if (c.nearest_ethernet_x, c.nearest_ethernet_y) == (ex, ey)]
        assert len(on_board) == 48, (ex, ey, len(on_board))
        far = max(on_board, key=lambda c: abs(c.x - ex) + abs(c.y - ey))
        for x, y in [(ex, ey), (far.x, far.y)]:
            size = rng.choice([1, 3, 256, 1000, 4099])
            address = 0x60000000 + rng.randrange(0, 1 << 20)
            data = rng.randbytes(size)
            n, _ = txrx.write_memory(x, y, address, data)
            assert n == size, (n, size)
            back = txrx.read_memory(x, y, address, size)
            assert bytes(back) == data, f"{label}: chip ({x}, {y}) read back differs"
            alias = txrx.read_memory(x, y, address + 0x10000000, size)
            assert bytes(alias) == data, f"{label}: chip ({x}, {y}) unbuffered alias differs"


rng = random.Random(seed)
check_every_board(rng, "through the root board")
writer.set_machine(machine)
check_every_board(rng, "through each chip's board")
txrx.close()
print(f"ok boards={boards} chips={machine.n_chips} discovery_secs={discovery:.3f}")
