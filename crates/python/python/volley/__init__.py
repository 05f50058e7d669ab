"""volley: SpiNNaker boards from Python over volley's windowed SCP.

Every transfer runs in Rust with the GIL released; the caller waits in slices of at most
100 ms, checking for signals between them, so other threads run and Ctrl-C raises
KeyboardInterrupt promptly.

    import volley
    board = volley.Board("127.0.0.2")
    board.write(0, 0, 0, 0x60000000, b"hello")
    assert board.read(0, 0, 0, 0x60000000, 5) == b"hello"
"""

import builtins


class VolleyError(Exception):
    """Every error volley raises derives from this."""


class TimeoutError(VolleyError, builtins.TimeoutError):  # noqa: A001
    """A request got no reply after every try (the message names the command, chip and
    address, and what came back instead)."""


class ConnectionRefusedError(VolleyError, builtins.ConnectionRefusedError):  # noqa: A001
    """Nothing listens at the board's address."""


class ScpError(VolleyError):
    """The board answered with an error code; ``rc`` is ``(name, value)``."""

    def __init__(self, message, rc):
        super().__init__(message)
        self.rc = rc


from ._volley import Board, Machine  # noqa: E402

__all__ = ["Board", "Machine", "ConnectionRefusedError", "ScpError", "TimeoutError", "VolleyError"]
