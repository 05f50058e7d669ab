"""What a write reads from the caller's object: `bytes` and any C-contiguous buffer in
place (a numpy array is not duplicated), a strided view copied once, anything without the
buffer protocol refused."""

import os
import subprocess
import sys
import threading

import numpy
import pytest

import volley
from volley import _volley

SDRAM = 0x60000000


def test_contiguous_buffers_are_read_in_place_and_strided_ones_copied(emulate):
    emulate("--udp", "127.0.0.8:17893")
    board = volley.Board("127.0.0.8")
    array = numpy.random.default_rng(6).integers(0, 2**32, size=1 << 20, dtype=numpy.uint32)
    before = _volley._copied_bytes()
    board.write(0, 0, 0, SDRAM, array)
    board.write(0, 0, 0, SDRAM + array.nbytes, memoryview(bytearray(b"in place")))
    assert _volley._copied_bytes() == before
    assert board.read(0, 0, 0, SDRAM, array.nbytes) == array.tobytes()
    assert board.read(0, 0, 0, SDRAM + array.nbytes, 8) == b"in place"

    strided = array[::2]
    board.write(0, 0, 0, SDRAM, strided)
    assert _volley._copied_bytes() == before + strided.nbytes
    assert board.read(0, 0, 0, SDRAM, strided.nbytes) == strided.tobytes()

    with pytest.raises(TypeError):
        board.write(0, 0, 0, SDRAM, 5)
    with pytest.raises(TypeError):
        board.write(0, 0, 0, SDRAM, "text")


# Run in a process of its own, so its peak memory is this write's alone.
PEAK = """
import resource, sys, numpy, volley
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
board = volley.Board("127.0.0.9")
array = numpy.ones(32 << 18, dtype=numpy.uint32)  # 32 MiB, every page touched
start = peak()
board.write(0, 0, 0, 0x60000000, array)
in_place = peak() - start
strided = array.reshape(-1, 2)[:, 0]  # 16 MiB a copy must hold
start = peak()
board.write(0, 0, 0, 0x60000000, strided)
print(in_place, peak() - start)
"""


def test_a_numpy_array_is_written_without_a_copy(emulate):
    emulate("--udp", "127.0.0.9:17893")
    out = subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True,
                         timeout=120, env=os.environ)
    assert out.returncode == 0, out.stderr
    in_place, copied = (int(n) for n in out.stdout.split())
    # The in-place write grows the peak by far less than the 32 MiB array; the strided
    # one by the 16 MiB its copy holds, which shows the measure would see a copy.
    assert in_place < 4 << 20, f"the peak grew {in_place} bytes writing a 32 MiB array"
    assert copied >= 15 << 20, f"a 16 MiB copy grew the peak only {copied} bytes"


def test_a_buffer_changed_during_a_write_gives_only_bytes_it_held(emulate):
    """Another thread rewrites the bytearray while the write reads it in place: no crash,
    and every byte that lands is one the buffer held at some moment (0x00 or 0xff)."""
    emulate("--udp", "127.0.0.16:17893")
    board = volley.Board("127.0.0.16", window=1)
    size = 4 << 20
    buf = bytearray(size)
    fills = (b"\xff" * size, bytes(size))
    stop = threading.Event()
    flips = [0]

    def flip():
        while not stop.is_set():
            buf[:] = fills[flips[0] % 2]
            flips[0] += 1

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        board.write(0, 0, 0, SDRAM, buf)
    finally:
        stop.set()
        flipper.join(timeout=30)
    assert flips[0] > 2, "the buffer did not change during the write"
    back = board.read(0, 0, 0, SDRAM, size)
    assert set(back) <= {0, 0xFF}
