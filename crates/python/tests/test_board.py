"""volley.Board against `volley emulate`, byte for byte, and its errors."""

import builtins
import threading
import time

import pytest

import volley

SDRAM = 0x60000000


def test_write_read_fill_sver_and_stats(emulate):
    emulate("--udp", "127.0.0.2:17893")
    board = volley.Board("127.0.0.2")
    data = bytes(range(256)) * 4096 + b"tail"
    board.write(1, 2, 0, SDRAM, data)
    assert board.read(1, 2, 0, SDRAM, len(data)) == data
    board.write(1, 2, 0, SDRAM, bytearray(b"abcd"))
    board.write(1, 2, 0, SDRAM + 4, memoryview(b"efgh"))
    assert board.read(1, 2, 0, SDRAM, 8) == b"abcdefgh"
    board.fill(0, 0, 0, SDRAM, 0x01020304, 16)
    assert board.read(0, 0, 0, SDRAM, 16) == bytes([4, 3, 2, 1]) * 4
    version = board.sver()
    assert version["name"] == "SC&MP/SpiNNaker" and version["version"] == "4.0.0"
    stats = board.stats()
    assert stats["sent"] > 4096 and stats["window"] == 8


def test_errors_are_volleys_own(emulate):
    emulate("--udp", "127.0.0.3:17893")
    board = volley.Board("127.0.0.3", timeout_ms=50, tries=2)
    with pytest.raises(volley.ScpError) as error:
        board.read(0, 0, 0, 0x1000, 4)
    assert error.value.rc == ("RC_ARG", 0x84)
    assert "read to chip" in str(error.value)
    with pytest.raises(ValueError, match="window must be 1 to 1024, not 0"):
        volley.Board("127.0.0.3", window=0)
    with pytest.raises(ValueError, match="p must be 0 to 31, not 40"):
        board.read(0, 0, 40, SDRAM, 4)


def test_a_closed_port_is_refused():
    with pytest.raises(volley.ConnectionRefusedError) as error:
        board = volley.Board("127.0.0.4", port=9, window=8, timeout_ms=50, tries=2)
        board.sver()
    assert isinstance(error.value, builtins.ConnectionRefusedError)
    assert isinstance(error.value, volley.VolleyError)


def test_other_threads_run_during_a_transfer(emulate):
    emulate("--udp", "127.0.0.5:17893", "--delay-ms", "2")
    board = volley.Board("127.0.0.5", window=1)
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    thread = threading.Thread(target=tick)
    thread.start()
    try:
        board.write(0, 0, 0, SDRAM, b"\x00" * (256 * 100))
    finally:
        stop.set()
        thread.join(timeout=10)
    # 100 requests at 2 ms each: the ticker ran all along, not only before and after.
    assert len(ticks) > 10, ticks


def test_ctrl_c_interrupts_a_long_transfer(emulate):
    import signal
    import subprocess
    import sys

    emulate("--udp", "127.0.0.6:17893", "--delay-ms", "5")
    # A thread of the child says when the transfer (10000 requests at 5 ms: 50 s) has
    # run for 0.2 s, which it can only do because the GIL is released.
    script = (
        "import faulthandler, signal, sys, threading, time, volley\n"
        "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
        # Python leaves SIGINT ignored if it started so (a job a non-interactive shell
        # ran in the background): the user's Ctrl-C is Python's own handler.
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "board = volley.Board('127.0.0.6', window=1)\n"
        "data = bytes(256 * 10000)\n"
        "def say():\n"
        "    time.sleep(0.2)\n"
        "    print('started', flush=True)\n"
        "threading.Thread(target=say, daemon=True).start()\n"
        "try:\n"
        "    board.write(0, 0, 0, 0x60000000, data)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "started"
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        # Where it is stuck: every thread's Python stack (faulthandler, on SIGUSR1).
        child.send_signal(signal.SIGUSR1)
        try:
            child.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        child.kill()
        out, err = child.communicate(timeout=10)
        pytest.fail(f"the child did not end 10 s after Ctrl-C; stdout {out!r}; stderr:\n{err}")
    assert child.returncode == 3 and "interrupted" in out, (child.returncode, out, err)
    # One 100 ms slice, and the request in flight.
    assert time.monotonic() - sent < 2.0


def test_a_board_through_a_lossy_relay(emulate, volley_process):
    emulate("--udp", "127.0.0.10:17893")
    line = volley_process("netsim", "--listen", "127.0.0.11:17893", "--upstream",
                          "127.0.0.10:17893", "--loss", "0.05", "--seed", "11")
    assert "127.0.0.11:17893" in line
    board = volley.Board("127.0.0.11", timeout_ms=20, tries=20)
    data = bytes(range(251)) * 1000
    board.write(0, 0, 0, SDRAM, bytearray(data))
    assert board.read(0, 0, 0, SDRAM, len(data)) == data
    assert board.stats()["retransmits"] > 0
