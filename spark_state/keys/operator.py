"""Keys of operator (non-keyed) state: pure functions, no I/O.

Layout (one store per partition; values are the descriptor serializer's bytes)::

    [keyspace][mode u8][len(name) u8][name UTF-8][index u32 BE]        -> element    mode 1 = list (even-split)
                                                                                     mode 2 = union list
    [keyspace][mode u8][len(name) u8][name UTF-8][serialized map key]  -> map value  mode 3 = broadcast

``keyspace`` is :data:`KEYED_OPERATOR_PREFIX` (``0xFE``) in the store of a *keyed* function
(its keyed-state keys start with a key group, first byte 0x00..0x7F, and the system keyspace
with 0xFF, so a mode byte alone could meet a key group of 256 or more; 0xFE meets neither),
and ``b""`` in a ``checkpointed_process`` store, which has no keyed state. The *state
prefix* of one state is everything before the index or map key; list indexes sort in list
order. Schema records of operator states are system keys (:mod:`.system`).
"""

from __future__ import annotations

import struct
from typing import Union

__all__ = [
    "KEYED_OPERATOR_PREFIX",
    "MODE_SPLIT",
    "MODE_UNION",
    "MODE_BROADCAST",
    "MODES",
    "MODE_KINDS",
    "INDEX",
    "state_prefix",
    "index_suffix",
    "modes_range",
    "split_key",
]

#: First byte of operator-state keys in a keyed function's store, before the mode byte.
KEYED_OPERATOR_PREFIX = b"\xfe"
#: The mode byte: how a state is redistributed on rescale.
MODE_SPLIT = 1      # list state, even-split
MODE_UNION = 2      # union list state
MODE_BROADCAST = 3  # broadcast (map) state
MODES = (MODE_SPLIT, MODE_UNION, MODE_BROADCAST)
#: Each mode's ``kind`` in the operator state's schema record.
MODE_KINDS = {MODE_SPLIT: "list", MODE_UNION: "union", MODE_BROADCAST: "broadcast"}
#: A list element's index, uint32 BE.
INDEX = struct.Struct(">I")


def state_prefix(mode: int, name: Union[str, bytes], keyspace: bytes = b"") -> bytes:
    """``[keyspace][mode][len(name)][name]``: the prefix of one operator state's entries
    (``name`` as ``str`` or as its UTF-8 bytes)."""
    raw = name.encode("utf-8") if isinstance(name, str) else name
    if len(raw) > 255:
        raise ValueError(f"operator state name {raw.decode('utf-8', 'replace')!r} is longer than 255 bytes")
    return keyspace + bytes((mode, len(raw))) + raw


def index_suffix(index: int) -> bytes:
    """The suffix of list element ``index``."""
    return INDEX.pack(index)


def modes_range(keyspace: bytes = b"") -> tuple[bytes, bytes]:
    """``[start, end)`` of every operator-state entry under ``keyspace``."""
    return keyspace + bytes((MODE_SPLIT,)), keyspace + bytes((MODE_BROADCAST + 1,))


def split_key(key: bytes, keyspace: bytes = b"") -> tuple[int, bytes, bytes]:
    """``(mode, name bytes, suffix)`` of an operator-state key under ``keyspace``."""
    p = len(keyspace)
    mode, n = key[p], key[p + 1]
    return mode, key[p + 2:p + 2 + n], key[p + 2 + n:]
