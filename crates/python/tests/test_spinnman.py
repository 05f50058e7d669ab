"""SpiNNMan 7.4.1's Transceiver with volley.spinnman.accelerate runs the same
discovery-write-read sequence as without it, byte for byte, on a 3-board machine."""

import io
import os
import random

import pytest

try:
    import spinnman  # noqa: F401
except ImportError:
    pytest.fail("SpiNNMan is not installed: run `cargo xtask test` (it installs SpiNNMan==1!7.4.1 "
                "into target/peers/venv)", pytrace=False)

import volley  # noqa: E402
import volley.spinnman  # noqa: E402

SDRAM = 0x60000000


def sequence(txrx, machine, rng, tmp):
    """Writes to and reads back from the Ethernet chip and a far chip of every board,
    with every form of data SpiNNMan takes; returns what it checked."""
    checked = 0
    for eth in machine.ethernet_connected_chips:
        far = max((c for c in machine.chips
                   if (c.nearest_ethernet_x, c.nearest_ethernet_y) == (eth.x, eth.y)),
                  key=lambda c: abs(c.x - eth.x) + abs(c.y - eth.y))
        for x, y in [(eth.x, eth.y), (far.x, far.y)]:
            data = rng.randbytes(4000)
            assert txrx.write_memory(x, y, SDRAM, data) == (4000, 0)
            assert txrx.read_memory(x, y, SDRAM, 4000) == bytearray(data)
            n, total = txrx.write_memory(x, y, SDRAM + 8192, bytearray(data), offset=100,
                                         n_bytes=1000, get_sum=True)
            words = [int.from_bytes(data[i:i + 4], "little") for i in range(0, 4000, 4)]
            assert (n, total) == (1000, sum(words) & 0xFFFFFFFF)
            assert bytes(txrx.read_memory(x, y, SDRAM + 8192, 1000)) == data[100:1100]
            txrx.write_memory(x, y, SDRAM + 16384, 0x01020304)
            assert txrx.read_memory(x, y, SDRAM + 16384, 4) == bytearray([4, 3, 2, 1])
            path = os.path.join(tmp, f"{x}-{y}.bin")
            with open(path, "wb") as f:
                f.write(data)
            assert txrx.write_memory(x, y, SDRAM + 20000, path)[0] == 4000
            assert txrx.read_memory(x, y, SDRAM + 20000, 4000) == bytearray(data)
            with io.FileIO(path) as raw:
                txrx.write_memory(x, y, SDRAM + 30000, raw, n_bytes=3000)
            assert txrx.read_memory(x, y, SDRAM + 30000, 3000) == bytearray(data[:3000])
            checked += 1
    return checked


def run(root, accelerate, tmp):
    from spinn_utilities.config_holder import set_config
    from spinnman.config_setup import unittest_setup
    from spinnman.data.spinnman_data_writer import SpiNNManDataWriter
    from spinnman.transceiver import create_transceiver_from_hostname

    unittest_setup()
    set_config("Machine", "version", "5")
    writer = SpiNNManDataWriter.mock()
    txrx = create_transceiver_from_hostname(root)
    if accelerate:
        volley.spinnman.accelerate(txrx)
    machine = txrx.get_machine_details()
    txrx.discover_scamp_connections()
    rng = random.Random(1)
    checked = sequence(txrx, machine, rng, tmp)
    writer.set_machine(machine)
    checked += sequence(txrx, machine, rng, tmp)
    if accelerate:
        # volley carried the requests, through every board's own connection.
        assert len(txrx.volley_boards) == 3, txrx.volley_boards
        assert all(b.stats()["sent"] > 0 for b in txrx.volley_boards.values())
        assert all(b.stats()["window"] == 8 for b in txrx.volley_boards.values())
    txrx.close()
    return machine.n_chips, checked


def test_accelerate_passes_spinnmans_own_sequence(emulate, tmp_path):
    emulate("--boards", "3", "--base-ip", "127.0.33.0")
    plain = run("127.0.33.0", False, str(tmp_path))
    assert plain == run("127.0.33.0", True, str(tmp_path)) == (144, 12)


def test_accelerate_raises_spinnmans_exceptions(emulate):
    from spinnman.exceptions import SpinnmanGenericProcessException

    emulate("--boards", "3", "--base-ip", "127.0.34.0")
    from spinn_utilities.config_holder import set_config
    from spinnman.config_setup import unittest_setup
    from spinnman.data.spinnman_data_writer import SpiNNManDataWriter
    from spinnman.transceiver import create_transceiver_from_hostname

    unittest_setup()
    set_config("Machine", "version", "5")
    SpiNNManDataWriter.mock()
    txrx = volley.spinnman.accelerate(create_transceiver_from_hostname("127.0.34.0"))
    with pytest.raises(SpinnmanGenericProcessException, match="RC_ARG"):
        txrx.read_memory(0, 0, 0x1000, 4)
    with pytest.raises(ValueError, match="keep must be 0 to 7, not 8"):
        volley.spinnman.accelerate(txrx, keep=8)
    txrx.close()
