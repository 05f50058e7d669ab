"""SpiNNMan 7.4.1 on an emulated machine, run as SpiNNFrontEndCommon runs it: discovery
(create_transceiver_from_hostname + get_machine_details + discover_scamp_connections),
then the machine in SpiNNMan's data view so each chip's requests go through its own
board, then write_memory chip by chip, and read_memory chip by chip, checked.

Usage: machine_spinnman.py ROOT_IP BYTES_PER_CHIP SEED
Prints one JSON line: {"discovery_s": .., "write_s": .., "read_s": .., "chips": ..}.
Exits non-zero if a chip reads back differently from what was written.
"""
import json
import logging
import random
import sys
import time

from spinn_utilities.config_holder import set_config
from spinnman.config_setup import unittest_setup
from spinnman.data.spinnman_data_writer import SpiNNManDataWriter

BASE = 0x60000000


def main():
    root, per_chip, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    logging.disable(logging.WARNING)
    unittest_setup()
    set_config("Machine", "version", "5")
    writer = SpiNNManDataWriter.mock()
    from spinnman.transceiver import create_transceiver_from_hostname

    start = time.perf_counter()
    txrx = create_transceiver_from_hostname(root)
    machine = txrx.get_machine_details()
    txrx.discover_scamp_connections()
    discovery = time.perf_counter() - start
    writer.set_machine(machine)

    chips = sorted((c.x, c.y) for c in machine.chips)
    rng = random.Random(seed)
    data = {chip: rng.randbytes(per_chip) for chip in chips}
    start = time.perf_counter()
    for (x, y) in chips:
        txrx.write_memory(x, y, BASE, data[x, y])
    wrote = time.perf_counter()
    for (x, y) in chips:
        if bytes(txrx.read_memory(x, y, BASE, per_chip)) != data[x, y]:
            sys.exit(f"chip ({x}, {y}) read back differs from what SpiNNMan wrote")
    read = time.perf_counter()
    txrx.close()
    print(json.dumps({
        "discovery_s": discovery,
        "write_s": wrote - start,
        "read_s": read - wrote,
        "chips": len(chips),
    }))


if __name__ == "__main__":
    main()
