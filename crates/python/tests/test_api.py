"""The package as Python users expect it: bad arguments raise ValueError or TypeError
naming the argument, its value and the range, before anything is sent; one address rule
for Board and Machine; close(), context managers, reprs, docstrings and signatures."""

import inspect
import re

import pytest

import volley

SDRAM = 0x60000000


def test_bad_arguments_are_pythons_own_errors_and_nothing_is_sent(emulate):
    emulate("--udp", "127.0.0.13:17893")
    with volley.Board("127.0.0.13") as board:
        sent = board.stats()["sent"]
        for call, kind, text in [
            (lambda: board.read(300, 0, 0, SDRAM, 4), ValueError, "x must be 0 to 255, not 300"),
            (lambda: board.read(0, -1, 0, SDRAM, 4), ValueError, "y must be 0 to 255, not -1"),
            (lambda: board.read(0, 0, 32, SDRAM, 4), ValueError, "p must be 0 to 31, not 32"),
            (lambda: board.read(0, 0, 0, -4, 4), ValueError,
             "address must be 0 to 0xffffffff, not -4"),
            (lambda: board.read(0, 0, 0, 2**70, 4), ValueError, "address must be 0 to 0xffffffff"),
            (lambda: board.read(0, 0, 0, SDRAM, "4"), TypeError, "length must be an int, not str"),
            (lambda: board.write(0, 0, 0, SDRAM, 5), TypeError, "memoryview"),
            (lambda: board.fill(0, 0, 0, SDRAM, 0, 6), ValueError,
             "fill: length must be a multiple of 4"),
            (lambda: board.fill(0, 0, 0, SDRAM + 2, 0, 8), ValueError,
             "fill: address must be word aligned"),
            (lambda: board.fill(0, 0, 0, SDRAM, 2**32, 8), ValueError,
             "value must be 0 to 0xffffffff, not 4294967296"),
        ]:
            with pytest.raises(kind, match=re.escape(text)):
                call()
        assert board.stats()["sent"] == sent, "a refused call sent something"
    for kwargs, text in [
        ({"port": 70000}, "port must be 1 to 65535, not 70000"),
        ({"timeout_ms": -1}, "timeout_ms must be 1 to 3600000, not -1"),
        ({"window": 0}, "window must be 1 to 1024, not 0"),
        ({"window": "big"}, "window must be 1 to 1024 or \"auto\", not 'big'"),
        ({"tries": 0}, "tries must be 1 to 1000, not 0"),
    ]:
        with pytest.raises(ValueError, match=re.escape(text)):
            volley.Board("127.0.0.13", **kwargs)


def test_one_address_rule_and_whole_objects(emulate):
    emulate("--udp", "127.0.0.14:17893")
    for host, kwargs in [("127.0.0.14", {}), ("127.0.0.14:17893", {}),
                         ("127.0.0.14", {"port": 17893})]:
        with volley.Board(host, window=4, **kwargs) as board:
            assert repr(board) == "Board('127.0.0.14:17893', window=4)"
            board.write(0, 0, 0, SDRAM, b"abcd")
            assert board.read(0, 0, 0, SDRAM, 4) == b"abcd"
        assert repr(board) == "Board('127.0.0.14:17893', closed)"
        with pytest.raises(ValueError, match=re.escape("Board('127.0.0.14:17893') is closed")):
            board.read(0, 0, 0, SDRAM, 4)
        board.close()  # twice is allowed
    with pytest.raises(ValueError, match="names port 17893, and port is 5"):
        volley.Board("127.0.0.14:17893", port=5)
    with pytest.raises(ValueError, match="is not a port"):
        volley.Board("127.0.0.14:http")


def test_machines_take_what_boards_take(emulate):
    emulate("--boards", "3", "--base-ip", "127.0.36.0")
    with volley.Machine("127.0.36.0:17893", window=6, tries=4) as machine:
        assert repr(machine) == "Machine('127.0.36.0:17893', boards=3, chips=144)"
        machine.fill(5, 9, 0, SDRAM, 0x01020304, 16)
        assert machine.read(5, 9, 0, SDRAM, 16) == bytes([4, 3, 2, 1]) * 4
        assert machine.sver(5, 9)["x"] == 5
        stats = machine.stats()
        assert len(stats["boards"]) == 3 and stats["window"] == 18
        assert stats["sent"] == sum(b["sent"] for b in stats["boards"]) > 0
        with pytest.raises(ValueError, match=re.escape(
                "read_many: an item is (x, y, address, length) or (x, y, p, address, length), "
                "not 3 values")):
            machine.read_many([(0, 0, SDRAM)])
        with pytest.raises(ValueError, match="x must be 0 to 255, not 300"):
            machine.write_many([(300, 0, SDRAM, b"x")])
    with pytest.raises(ValueError, match="is closed"):
        machine.read(0, 0, 0, SDRAM, 4)


def test_help_shows_the_parameters_and_signatures_match_the_stubs():
    assert str(inspect.signature(volley.Board)) == \
        "(host, port=None, window='auto', timeout_ms=None, tries=8)"
    assert str(inspect.signature(volley.Machine)) == \
        "(root, port=None, window='auto', timeout_ms=None, tries=8)"
    for name in ("host", "port", "window", "timeout_ms", "tries"):
        assert name + ":" in volley.Board.__doc__
    for cls in (volley.Board, volley.Machine):
        for method in ("read", "write", "fill", "sver", "stats", "close"):
            doc = getattr(cls, method).__doc__
            assert doc and len(doc) > 40, (cls, method)
    assert str(inspect.signature(volley.Board.read)) == "(self, x, y, p, address, length)"
    assert str(inspect.signature(volley.Board.sver)) == "(self, x=0, y=0, p=0)"


def test_a_plain_board_is_a_machine_of_one_board(emulate):
    emulate("--udp", "127.0.0.15:17893")
    with volley.Machine("127.0.0.15") as machine:
        assert repr(machine) == "Machine('127.0.0.15:17893', boards=1, chips=48)"
        machine.write(7, 7, 0, SDRAM, b"corner")
        assert machine.read(7, 7, 0, SDRAM, 6) == b"corner"
