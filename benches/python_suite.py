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

Prints one JSON line: {"write_s": .., "write_cpu_s": .., "read_s": .., ...}, each phase's
wall seconds and this process's CPU seconds in it (every thread's, so the volley package's
Rust threads count). Exits non-zero if anything reads back differently from what was
written.
"""
import inspect
import json
import logging
import random
import sys
import time

BASE = 0x60000000


def clock():
    """Wall seconds and this process's CPU seconds (every thread's, user and system)."""
    return time.perf_counter(), time.process_time()


def since(start):
    """Wall and CPU seconds since ``start`` (a ``clock()``)."""
    now = clock()
    return now[0] - start[0], now[1] - start[1]


def phases(**timed):
    """A round's JSON fields: NAME_s and NAME_cpu_s for each (wall, cpu) given."""
    line = {}
    for name, (wall, cpu) in timed.items():
        line[f"{name}_s"] = wall
        line[f"{name}_cpu_s"] = cpu
    return line


def spinnman_transceiver(root, machine_view):
    """A SpiNNMan Transceiver on ROOT (version 5 boards); with ``machine_view``, after
    discovery, the machine stored in SpiNNMan's data view as SpiNNFrontEndCommon stores
    it. Returns (transceiver, chips, discovery (wall, cpu) seconds)."""
    from spinn_utilities.config_holder import set_config
    from spinnman.config_setup import unittest_setup
    from spinnman.data.spinnman_data_writer import SpiNNManDataWriter

    logging.disable(logging.WARNING)
    unittest_setup()
    set_config("Machine", "version", "5")
    writer = SpiNNManDataWriter.mock()
    from spinnman.transceiver import create_transceiver_from_hostname

    start = clock()
    txrx = create_transceiver_from_hostname(root)
    if not machine_view:
        return txrx, [(0, 0)], since(start)
    machine = txrx.get_machine_details()
    txrx.discover_scamp_connections()
    discovery = since(start)
    writer.set_machine(machine)
    return txrx, sorted((c.x, c.y) for c in machine.chips), discovery


def chip_by_chip(txrx, chips, data, length):
    """SpiNNMan's calls, one chip at a time; returns the write's and the read's (wall,
    cpu) seconds."""
    start = clock()
    for (x, y) in chips:
        txrx.write_memory(x, y, BASE, data[x, y])
    write = since(start)
    start = clock()
    for (x, y) in chips:
        if bytes(txrx.read_memory(x, y, BASE, length)) != data[x, y]:
            sys.exit(f"chip ({x}, {y}) read back differs from what was written")
    return write, since(start)


def machine_round(system, root, per_chip, seed):
    rng = random.Random(seed)
    if system == "volley":
        import volley

        start = clock()
        machine = volley.Machine(root)
        discovery = since(start)
        chips = sorted(machine.chips)
        data = {chip: rng.randbytes(per_chip) for chip in chips}
        writes = [(x, y, BASE, data[x, y]) for (x, y) in chips]
        reads = [(x, y, BASE, per_chip) for (x, y) in chips]
        start = clock()
        machine.write_many(writes)
        write = since(start)
        start = clock()
        back = machine.read_many(reads)
        read = since(start)
        for (x, y), got in zip(chips, back):
            if got != data[x, y]:
                sys.exit(f"chip ({x}, {y}) read back differs from what was written")
        return {**phases(discovery=discovery, write=write, read=read), "chips": len(chips)}
    txrx, chips, discovery = spinnman_transceiver(root, machine_view=True)
    if system == "accelerate":
        import volley.spinnman

        volley.spinnman.accelerate(txrx)
    elif system != "spinnman":
        sys.exit(f"no machine system {system!r}")
    data = {chip: rng.randbytes(per_chip) for chip in chips}
    write, read = chip_by_chip(txrx, chips, data, per_chip)
    txrx.close()
    return {**phases(discovery=discovery, write=write, read=read), "chips": len(chips)}


def board_round(system, where, size, seed, window):
    host, _, port = where.partition(":")
    port = int(port or 17893)
    data = random.Random(seed).randbytes(size)
    if system == "spinnman":
        if port != 17893:
            sys.exit("SpiNNMan talks to port 17893 only")
        txrx, _, _ = spinnman_transceiver(host, machine_view=False)
        write, read = chip_by_chip(txrx, [(0, 0)], {(0, 0): data}, size)
        txrx.close()
        return phases(write=write, read=read)
    if system == "rig":
        # rig 2.4.1 predates CPython 3.11, which removed inspect.getargspec.
        inspect.getargspec = lambda f: tuple(inspect.getfullargspec(f))[:4]
        from rig.machine_control.scp_connection import SCPConnection

        conn = SCPConnection(host, port=port)
        start = clock()
        conn.write(256, window, 0, 0, 0, BASE, data)
        write = since(start)
        start = clock()
        back = conn.read(256, window, 0, 0, 0, BASE, size)
    elif system == "volley":
        import volley

        board = volley.Board(host, port=port)
        start = clock()
        board.write(0, 0, 0, BASE, data)
        write = since(start)
        start = clock()
        back = board.read(0, 0, 0, BASE, size)
    else:
        sys.exit(f"no board system {system!r}")
    read = since(start)
    if back != data:
        sys.exit(f"{system} read back differs from what it wrote")
    return phases(write=write, read=read)


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
