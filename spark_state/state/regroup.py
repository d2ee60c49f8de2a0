"""Rebuilding one new partition's keyed state from the partitions of an old layout.

A keyed operator's partition ``i`` of ``n`` owns the key groups
``compute_key_group_range_for_operator_index(max_parallelism, n, i)`` (Flink's assignment).
When the parallelism changes from ``m`` to ``n``, new partition ``i`` takes, from each old
partition ``j`` of ``m`` whose key group range overlaps its own, exactly the overlap (with
:func:`~.rescale.copy_key_groups`: state, timers, TTL index entries, markers and schema
records). Old partitions without overlap are not read. Operator state, which moves by its own
rules, is not handled here (see :func:`spark_state.process.operator_state.redistribute`).
"""

from __future__ import annotations

from typing import Mapping

from ..partitioning.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from ..engine.store import VersionedStore
from .rescale import copy_key_groups


def owned_key_groups(max_parallelism: int, parallelism: int, partition: int) -> KeyGroupRange:
    """The key groups partition ``partition`` of ``parallelism`` owns."""
    return compute_key_group_range_for_operator_index(max_parallelism, parallelism, partition)


def overlapping_partitions(own: KeyGroupRange, max_parallelism: int, old_parallelism: int) -> list[int]:
    """The old partitions (of ``old_parallelism``) that hold some of the key groups ``own``."""
    return [j for j in range(old_parallelism)
            if not own.intersection(owned_key_groups(max_parallelism, old_parallelism, j)).is_empty]


def copy_owned_key_groups(target: VersionedStore, own: KeyGroupRange, max_parallelism: int, old_parallelism: int,
                          old_stores: Mapping[int, VersionedStore]) -> int:
    """Stage into ``target`` the keyed state of key groups ``own`` held by ``old_stores``
    (old partition -> loaded store, of a layout with ``old_parallelism`` partitions); nothing
    is committed. Returns the number of data entries copied."""
    copied = 0
    for j, source in old_stores.items():
        r = own.intersection(owned_key_groups(max_parallelism, old_parallelism, j))
        if not r.is_empty:
            copied += copy_key_groups(source, target, r.start, r.end)
    return copied
