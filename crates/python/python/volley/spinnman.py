"""Make SpiNNMan's own reads and writes fast: ``accelerate(transceiver)``.

    txrx = create_transceiver_from_hostname(host)
    volley.spinnman.accelerate(txrx)        # the one line a program adds

replaces that transceiver's ``read_memory`` and ``write_memory`` with volley's, with
SpiNNMan 7.4.1's signatures and behaviour, and SpiNNMan's exception types for its errors.
Each request goes through the connection SpiNNMan itself would choose (its
``MostDirectConnectionSelector``: the chip's own board once the machine is in SpiNNMan's
data view), over sockets of volley's own to the same addresses. It never changes a
board's transient-tag timeout (SpiNNMan's 2.56 s stays). SpiNNMan's own reads and writes
now go through volley, so volley keeps as many requests in flight per board as SpiNNMan
would (8, the board's transient tags); ``keep=N`` leaves N of them to a program that
also drives the board another way (SpiNNMan's other calls, a second tool).

For a sPyNNaker script, accelerate the transceiver once it exists, after ``sim.setup()``
has made it, e.g. ``volley.spinnman.accelerate(FecDataView.get_transceiver())``; every
read and write SpiNNFrontEndCommon makes through ``FecDataView`` then goes through volley.
"""

import io
import os
import struct

from . import Board
from . import ConnectionRefusedError as _Refused
from . import ScpError as _ScpError
from . import TimeoutError as _Timeout

#: A board's transient tags: the most requests in flight to one board.
TAGS = 8
_ONE_WORD = struct.Struct("<I")
_READ_CHUNK = 1 << 20


def accelerate(transceiver, keep=0):
    """Replaces ``transceiver``'s ``read_memory`` and ``write_memory`` with volley's;
    returns the transceiver. ``keep`` (0 to 7) is how many of each board's 8 transient
    tags volley leaves free for other traffic to the board."""
    if isinstance(keep, bool) or not isinstance(keep, int):
        raise TypeError(f"keep must be an int, not {type(keep).__name__}")
    if not 0 <= keep < TAGS:
        raise ValueError(f"keep must be 0 to {TAGS - 1}, not {keep}")
    window = TAGS - keep
    boards = {}

    def board_for(x, y):
        from spinnman.data import SpiNNManDataView

        connections = {}
        lead = None
        for conn in transceiver._scamp_connections:
            if (conn.chip_x, conn.chip_y) == (0, 0):
                lead = conn
            connections[conn.chip_x, conn.chip_y] = conn
        if lead is None:
            lead = transceiver._scamp_connections[0]
        conn = connections.get((x, y))
        if conn is None:
            if not SpiNNManDataView.has_machine() or len(connections) == 1:
                conn = lead
            else:
                conn = connections.get(SpiNNManDataView.get_nearest_ethernet(x, y), lead)
        key = (conn.remote_ip_address, conn.remote_port)
        if key not in boards:
            boards[key] = Board(key[0], port=key[1], window=window, tries=10)
        return boards[key]

    def call(operation, x, y, p, work):
        from spinnman.exceptions import (
            SpinnmanGenericProcessException, SpinnmanIOException,
            SpinnmanTimeoutException, SpinnmanUnexpectedResponseCodeException)
        try:
            return work(board_for(x, y))
        except _Timeout as e:
            inner = SpinnmanTimeoutException(operation, None, str(e))
            raise SpinnmanGenericProcessException(inner, e.__traceback__, x, y, p, "") from e
        except _ScpError as e:
            inner = SpinnmanUnexpectedResponseCodeException(operation, operation, e.rc[0])
            raise SpinnmanGenericProcessException(inner, e.__traceback__, x, y, p, "") from e
        except _Refused as e:
            raise SpinnmanIOException(str(e)) from e

    def write_memory(x, y, base_address, data, *, n_bytes=None, offset=0, cpu=0, get_sum=False):
        if isinstance(data, io.RawIOBase):
            assert n_bytes is not None
            return n_bytes, _write_reader(x, y, cpu, base_address, data, n_bytes, get_sum)
        if isinstance(data, str):
            if n_bytes is None:
                n_bytes = os.stat(data).st_size
            with open(data, "rb") as reader:
                return n_bytes, _write_reader(x, y, cpu, base_address, reader, n_bytes, get_sum)
        if isinstance(data, int):
            word = _ONE_WORD.pack(data)
            call("WriteMemory", x, y, cpu, lambda b: b.write(x, y, cpu, base_address, word))
            return 4, _checksum(word) if get_sum else 0
        assert isinstance(data, (bytes, bytearray))
        if n_bytes is None:
            n_bytes = len(data)
        piece = memoryview(data)[offset:offset + n_bytes]
        call("WriteMemory", x, y, cpu, lambda b: b.write(x, y, cpu, base_address, piece))
        # As SpiNNMan: the sum of all of ``data``'s words, whatever the offset.
        return n_bytes, _checksum(data) if get_sum else 0

    def _write_reader(x, y, cpu, base_address, reader, n_bytes, get_sum):
        total = 0
        done = 0
        while done < n_bytes:
            chunk = reader.read(min(_READ_CHUNK, n_bytes - done))
            if not chunk:
                break
            call("WriteMemory", x, y, cpu,
                 lambda b, c=chunk, at=base_address + done: b.write(x, y, cpu, at, c))
            if get_sum:
                total = (total + _checksum(chunk)) & 0xFFFFFFFF
            done += len(chunk)
        return total

    def read_memory(x, y, base_address, length, cpu=0):
        return bytearray(call("ReadMemory", x, y, cpu,
                              lambda b: b.read(x, y, cpu, base_address, length)))

    transceiver.write_memory = write_memory
    transceiver.read_memory = read_memory
    # The boards volley has opened, by (address, port), for whoever wants to look.
    transceiver.volley_boards = boards
    return transceiver


def _checksum(data):
    """SpiNNMan's checksum: the sum of the little-endian words, as 32 bits."""
    import numpy

    words = numpy.frombuffer(bytes(data), dtype=numpy.uint8).view(numpy.uint32)
    return int(numpy.sum(words, dtype=numpy.uint32)) & 0xFFFFFFFF
