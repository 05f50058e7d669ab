from typing import Any

from typing_extensions import Buffer

class Board:
    """One SpiNNaker board (or `volley emulate`) over UDP."""

    def __init__(
        self,
        host: str,
        port: int = 17893,
        window: int | str = "auto",
        timeout_ms: int | None = None,
        tries: int = 8,
    ) -> None: ...
    def read(self, x: int, y: int, p: int, address: int, length: int) -> bytes: ...
    def write(self, x: int, y: int, p: int, address: int, data: Buffer) -> None: ...
    def fill(self, x: int, y: int, p: int, address: int, value: int, length: int) -> None: ...
    def sver(self, x: int = 0, y: int = 0, p: int = 0) -> dict[str, Any]: ...
    def stats(self) -> dict[str, Any]: ...
