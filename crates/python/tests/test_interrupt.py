"""Ctrl-C at any point of a transfer: the calls after it get their own replies, byte for
byte, never one of the abandoned transfer's (the KeyboardInterrupt comes from
`_thread.interrupt_main`, as a terminal's Ctrl-C would)."""

import _thread
import os
import threading

import volley

SDRAM = 0x60000000
BIG = SDRAM + (32 << 20)
BIG_LEN = 16 << 20


def interrupted(call, delay):
    """Runs `call`, interrupted after `delay` seconds; whether it was (rather than
    finishing first, in which case the interrupt is taken here)."""
    finished = False
    timer = threading.Timer(delay, _thread.interrupt_main)
    try:
        # Started inside: at delay 0 the interrupt may land before start() returns.
        timer.start()
        call()
        finished = True
        timer.join()
    except KeyboardInterrupt:
        pass
    return not finished


def test_a_board_after_ctrl_c(emulate):
    emulate("--udp", "127.0.0.12:17893")
    board = volley.Board("127.0.0.12")
    small = os.urandom(4096)
    board.write(0, 0, 0, SDRAM + 0x100, small)
    big = os.urandom(BIG_LEN)
    board.write(0, 0, 0, BIG, big)
    cut = 0
    for round, delay in enumerate((0.0, 0.005, 0.02, 0.05, 0.1)):
        cut += interrupted(lambda: board.read(0, 0, 0, BIG, BIG_LEN), delay)
        # The call the issue saw fail: 4 bytes, then more, then a write read back.
        assert board.read(0, 0, 0, SDRAM + 0x100, 4) == small[:4], round
        assert board.read(0, 0, 0, SDRAM + 0x100, len(small)) == small, round
        cut += interrupted(lambda: board.write(0, 0, 0, BIG, big), delay)
        fresh = os.urandom(100_000)
        board.write(0, 0, 0, SDRAM + 0x200000, fresh)
        assert board.read(0, 0, 0, SDRAM + 0x200000, len(fresh)) == fresh, round
    assert cut >= 6, f"only {cut} of 10 transfers were cut"


def test_a_machine_after_ctrl_c(emulate):
    emulate("--boards", "3", "--base-ip", "127.0.35.0")
    machine = volley.Machine("127.0.35.0")
    chips = machine.chips
    small = {chip: os.urandom(4) for chip in chips}
    machine.write_many([(x, y, SDRAM, d) for (x, y), d in small.items()])
    cut = 0
    for round, delay in enumerate((0.0, 0.005, 0.02, 0.05)):
        cut += interrupted(
            lambda: machine.read_many([(x, y, 0, BIG, 65536) for (x, y) in chips]), delay)
        back = machine.read_many([(x, y, 0, SDRAM, 4) for (x, y) in chips])
        assert back == [small[chip] for chip in chips], round
    assert cut >= 2, f"only {cut} of 4 transfers were cut"
