"""Not a test module: `cargo xtask test python` runs `mypy --strict` over it for Python
3.10, 3.11 and 3.12, so the stubs take every buffer the docs promise."""

import array

import numpy

import volley


def writes(board: volley.Board, machine: volley.Machine) -> list[bytes]:
    for data in (
        b"bytes",
        bytearray(b"bytearray"),
        memoryview(b"memoryview"),
        array.array("I", [1, 2, 3]),
    ):
        board.write(0, 0, 0, 0x60000000, data)
    board.write(0, 0, 0, 0x60000000, numpy.zeros(16, dtype=numpy.uint32))
    machine.write(0, 0, 0, 0x60000000, numpy.arange(4, dtype=numpy.uint8))
    machine.write_many([(0, 0, 0x60000000, b"x"), (1, 0, 2, 0x60000000, numpy.ones(4))])
    board.fill(0, 0, 0, 0x60000000, 0xDEADBEEF, 64)
    with volley.Board("127.0.0.2:17893", window=8, timeout_ms=100, tries=3) as other:
        other.sver()
    return machine.read_many([(0, 0, 0x60000000, 4)]) + [board.read(0, 0, 0, 0x60000000, 4)]
