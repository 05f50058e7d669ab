"""What the tests share: `volley emulate` started as a user would, on its own address
(never 127.0.0.1, which SpiNNMan treats as a virtual machine)."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def volley_bin():
    path = os.environ.get("VOLLEY_BIN") or str(ROOT / "target" / "debug" / "volley")
    if not os.path.exists(path):
        pytest.fail(f"no volley binary at {path}: run `cargo build -p volley-cli` or set VOLLEY_BIN")
    return path


@pytest.fixture
def emulate(volley_process):
    """Starts `volley emulate ARGS...`; returns its listening line."""
    return lambda *args: volley_process("emulate", *args)


@pytest.fixture
def volley_process():
    """Starts `volley ARGS...`; returns its listening line. Stopped at the end."""
    started = []

    def start(*args):
        proc = subprocess.Popen(
            [volley_bin(), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        started.append(proc)
        line = proc.stdout.readline().strip()
        if not line.startswith("listening"):
            proc.kill()
            pytest.fail(f"volley {args[0]} printed {line!r}: {proc.stderr.read()}")
        return line

    yield start
    for proc in started:
        proc.kill()
        proc.wait(timeout=10)
