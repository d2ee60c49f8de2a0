"""CRC-32 of files and byte strings, used to detect corrupt checkpoint files on restore."""

from __future__ import annotations

import zlib

_CHUNK = 1 << 20


def crc32_bytes(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def crc32_file(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                return crc & 0xFFFFFFFF
            crc = zlib.crc32(chunk, crc)
