"""volley.Machine against `volley emulate --boards 3`, directly and through a lossy relay
per board, byte for byte."""

import random

import pytest

import volley

SDRAM = 0x60000000


def load_and_check(machine, seed, size):
    rng = random.Random(seed)
    data = {chip: rng.randbytes(size) for chip in machine.chips}
    machine.write_many([(x, y, SDRAM, d) for (x, y), d in data.items()])
    back = machine.read_many([(x, y, 0, SDRAM, size) for (x, y) in data])
    for (chip, want), got in zip(data.items(), back):
        assert got == want, f"chip {chip} read back differs"


def test_a_machine_is_discovered_loaded_and_read_back(emulate):
    assert emulate("--boards", "3", "--base-ip", "127.0.30.0") == \
        "listening root=127.0.30.0:17893 boards=3 chips=144"
    machine = volley.Machine("127.0.30.0")
    assert len(machine.chips) == 144
    assert [b[2] for b in machine.boards] == [f"127.0.30.{i}:17893" for i in range(3)]
    assert machine.info()["boards"] == 3
    load_and_check(machine, 1, 3000)
    machine.write(5, 9, 1, SDRAM + 8, bytearray(b"far chip"))
    assert machine.read(5, 9, 1, SDRAM + 8, 8) == b"far chip"
    with pytest.raises(ValueError, match="length must be 0 to 0x100000000, not 1099511627776"):
        machine.read(0, 0, 0, 0xFFFFFF00, 1 << 40)
    with pytest.raises(ValueError, match="past the end of the 32-bit address space"):
        machine.read(0, 0, 0, 0xFFFFFF00, 512)
    with pytest.raises(volley.VolleyError, match="not a live chip"):
        machine.read(12, 0, 0, SDRAM, 4)
    with pytest.raises(ValueError, match=r"write_many: an item is \(x, y, address, data\)"):
        machine.write_many([(0, 0, SDRAM)])


def test_a_machine_through_a_lossy_relay_per_board(emulate, volley_process):
    emulate("--boards", "3", "--base-ip", "127.0.31.0", "--report-base", "127.0.32.0")
    volley_process("netsim", "--boards", "3", "--listen-base", "127.0.32.0",
                   "--upstream-base", "127.0.31.0", "--loss", "0.05", "--seed", "7")
    machine = volley.Machine("127.0.32.0:17893")
    assert all(b[2].startswith("127.0.32.") for b in machine.boards)
    load_and_check(machine, 2, 2048)


def test_a_24_board_machine_is_loaded_and_read_back(emulate):
    assert emulate("--boards", "24", "--base-ip", "127.0.32.0") == \
        "listening root=127.0.32.0:17893 boards=24 chips=1152"
    machine = volley.Machine("127.0.32.0")
    assert len(machine.chips) == 1152 and len(machine.boards) == 24
    info = machine.info()
    assert (info["width"], info["height"], info["chips"]) == (48, 24, 1152)
    load_and_check(machine, 24, 1024)
