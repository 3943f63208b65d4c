"""Ways a state file gets damaged: garbage, a torn or zeroed write, a wrong JSON type, flipped
bytes, a stale copy, nesting deeper than any parser recurses. None of them depends on the
file's format."""

from __future__ import annotations

import random
import string
from pathlib import Path

VARIANTS = (
    "nested",  # once RecursionError: `run` died at every start, the file never set aside
    "garbage",
    "truncated",
    "zeros",
    "empty",
    "json-array",
    "json-null",
    "byte-flips",
    "stale-copy",
)


def corrupt(path: Path, variant: str, rng: random.Random, stale: bytes | None) -> str:
    """Damages the state file at `path`; returns what was done. `stale-copy` needs an older
    copy of the file (`stale`)."""
    try:
        current = path.read_bytes()
    except FileNotFoundError:
        current = b""
    if variant == "nested":  # well-formed JSON, a version-1 file (no checksum) 3,000 deep
        depth = rng.randint(1000, 3000)
        data = b'{"version":1,"x":' + b"[" * depth + b"]" * depth + b"}"
    elif variant == "garbage":
        data = rng.randbytes(rng.randint(1, 4096))
    elif variant == "truncated":
        data = current[: rng.randint(1, max(1, len(current) - 1))]
    elif variant == "zeros":
        data = b"\0" * max(1, len(current))
    elif variant == "empty":
        data = b""
    elif variant == "json-array":
        data = b"[]"
    elif variant == "json-null":
        data = b"null"
    elif variant == "byte-flips":
        flipped = bytearray(current or b"{}")
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(flipped))] = ord(rng.choice(string.printable))
        data = bytes(flipped)
    elif variant == "stale-copy":
        if stale is None:
            raise ValueError("stale-copy needs an older copy of the state file")
        data = stale
    else:
        raise ValueError(f"unknown corruption {variant!r}")
    path.write_bytes(data)
    return f"{variant} ({len(data)} bytes)"
