"""One system's round of the `machine` and `python` suites, run from Python.

Usage:
  python_suite.py machine SYSTEM ROOT_IP BYTES_PER_CHIP SEED
      SYSTEM: spinnman (SpiNNMan 7.4.1 as SpiNNFrontEndCommon runs it: discovery, then the
      machine in SpiNNMan's data view so each chip's requests go through its own board,
      then write_memory chip by chip and read_memory chip by chip), accelerate (the same
      loop after volley.spinnman.accelerate), or volley (volley.Machine's write_many and
      read_many over every chip).
  python_suite.py board SYSTEM HOST[:PORT] BYTES SEED [WINDOW]
      SYSTEM: spinnman (Transceiver.write_memory/read_memory on chip (0, 0)), rig (rig
      2.4.1's SCPConnection at WINDOW), or volley (volley.Board, window "auto").

Prints one JSON line: {"write_s": .., "read_s": .., ...}. Exits non-zero if anything reads
back differently from what was written.
"""
import inspect
import json
import logging
import random
import sys
import time

BASE = 0x60000000


def spinnman_transceiver(root, machine_view):
    """A SpiNNMan Transceiver on ROOT (version 5 boards); with ``machine_view``, after
    discovery, the machine stored in SpiNNMan's data view as SpiNNFrontEndCommon stores
    it. Returns (transceiver, chips, discovery seconds)."""
    from spinn_utilities.config_holder import set_config
    from spinnman.config_setup import unittest_setup
    from spinnman.data.spinnman_data_writer import SpiNNManDataWriter

    logging.disable(logging.WARNING)
    unittest_setup()
    set_config("Machine", "version", "5")
    writer = SpiNNManDataWriter.mock()
    from spinnman.transceiver import create_transceiver_from_hostname

    start = time.perf_counter()
    txrx = create_transceiver_from_hostname(root)
    if not machine_view:
        return txrx, [(0, 0)], time.perf_counter() - start
    machine = txrx.get_machine_details()
    txrx.discover_scamp_connections()
    discovery = time.perf_counter() - start
    writer.set_machine(machine)
    return txrx, sorted((c.x, c.y) for c in machine.chips), discovery


def chip_by_chip(txrx, chips, data, length):
    """SpiNNMan's calls, one chip at a time; returns (write_s, read_s)."""
    start = time.perf_counter()
    for (x, y) in chips:
        txrx.write_memory(x, y, BASE, data[x, y])
    wrote = time.perf_counter()
    for (x, y) in chips:
        if bytes(txrx.read_memory(x, y, BASE, length)) != data[x, y]:
            sys.exit(f"chip ({x}, {y}) read back differs from what was written")
    return wrote - start, time.perf_counter() - wrote


def machine_round(system, root, per_chip, seed):
    rng = random.Random(seed)
    if system == "volley":
        import volley

        start = time.perf_counter()
        machine = volley.Machine(root)
        discovery = time.perf_counter() - start
        chips = sorted(machine.chips)
        data = {chip: rng.randbytes(per_chip) for chip in chips}
        writes = [(x, y, BASE, data[x, y]) for (x, y) in chips]
        reads = [(x, y, BASE, per_chip) for (x, y) in chips]
        start = time.perf_counter()
        machine.write_many(writes)
        wrote = time.perf_counter()
        back = machine.read_many(reads)
        read = time.perf_counter()
        for (x, y), got in zip(chips, back):
            if got != data[x, y]:
                sys.exit(f"chip ({x}, {y}) read back differs from what was written")
        return {"discovery_s": discovery, "write_s": wrote - start, "read_s": read - wrote,
                "chips": len(chips)}
    txrx, chips, discovery = spinnman_transceiver(root, machine_view=True)
    if system == "accelerate":
        import volley.spinnman

        volley.spinnman.accelerate(txrx)
    elif system != "spinnman":
        sys.exit(f"no machine system {system!r}")
    data = {chip: rng.randbytes(per_chip) for chip in chips}
    write_s, read_s = chip_by_chip(txrx, chips, data, per_chip)
    txrx.close()
    return {"discovery_s": discovery, "write_s": write_s, "read_s": read_s,
            "chips": len(chips)}


def board_round(system, where, size, seed, window):
    host, _, port = where.partition(":")
    port = int(port or 17893)
    data = random.Random(seed).randbytes(size)
    if system == "spinnman":
        if port != 17893:
            sys.exit("SpiNNMan talks to port 17893 only")
        txrx, _, _ = spinnman_transceiver(host, machine_view=False)
        write_s, read_s = chip_by_chip(txrx, [(0, 0)], {(0, 0): data}, size)
        txrx.close()
        return {"write_s": write_s, "read_s": read_s}
    if system == "rig":
        # rig 2.4.1 predates CPython 3.11, which removed inspect.getargspec.
        inspect.getargspec = lambda f: tuple(inspect.getfullargspec(f))[:4]
        from rig.machine_control.scp_connection import SCPConnection

        conn = SCPConnection(host, port=port)
        start = time.perf_counter()
        conn.write(256, window, 0, 0, 0, BASE, data)
        wrote = time.perf_counter()
        back = conn.read(256, window, 0, 0, 0, BASE, size)
    elif system == "volley":
        import volley

        board = volley.Board(host, port=port)
        start = time.perf_counter()
        board.write(0, 0, 0, BASE, data)
        wrote = time.perf_counter()
        back = board.read(0, 0, 0, BASE, size)
    else:
        sys.exit(f"no board system {system!r}")
    read = time.perf_counter()
    if back != data:
        sys.exit(f"{system} read back differs from what it wrote")
    return {"write_s": wrote - start, "read_s": read - wrote}


def main():
    kind, system, where, size, seed = sys.argv[1:6]
    if kind == "machine":
        line = machine_round(system, where, int(size), int(seed))
    elif kind == "board":
        window = int(sys.argv[6]) if len(sys.argv) > 6 else 8
        line = board_round(system, where, int(size), int(seed), window)
    else:
        sys.exit(f"usage: {sys.argv[0]} machine|board SYSTEM WHERE SIZE SEED [WINDOW]")
    print(json.dumps(line))


if __name__ == "__main__":
    main()
