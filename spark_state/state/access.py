"""How a state reaches its bytes: straight to the store, or through the TTL decorator.

Both classes offer the same five operations on *user* values, so state types are written
once and TTL stays a layer that never touches them (as Flink's ``ttl/`` decorators do).
Scans return materialised lists: callers may write while they walk the result.
"""

from __future__ import annotations

from typing import Optional

from ..engine.store import VersionedStore, prefix_upper_bound
from ..ttl.config import TtlConfig
from ..ttl.kv import TtlKeyValue, TtlStats


class PlainAccess:
    """Unstamped values, no expiry."""

    ttl: Optional[TtlConfig] = None

    def __init__(self, store: VersionedStore) -> None:
        self._store = store
        self.get = store.get
        self.put = store.put
        self.delete = store.delete

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return list(self._store.iterate(prefix, prefix_upper_bound(prefix)))

    def raw_scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return self.scan(prefix)

    def before_commit(self, store_snapshots: bool) -> int:
        return 0

    def collect_background(self) -> None:
        pass


class TtlAccess:
    """Stamped values with expiry, through :class:`~spark_state.ttl.kv.TtlKeyValue`."""

    def __init__(self, store: VersionedStore, namespace: bytes, ttl: TtlConfig, stats: TtlStats) -> None:
        self._store = store
        self.ttl = ttl
        self.kv = TtlKeyValue(store, namespace, ttl, stats)
        self.get = self.kv.get
        self.put = self.kv.put
        self.delete = self.kv.delete
        self._candidates: list[tuple[bytes, int]] = []

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return list(self.kv.prefix_scan(prefix))

    def raw_scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Entries as stored (stamped), expired ones included."""
        return list(self._store.iterate(prefix, prefix_upper_bound(prefix)))

    def collect_background(self) -> None:
        """Background cleanup: find expired entries now, remove them at the next commit."""
        if self.ttl.cleanup_in_background:
            self._candidates = self.kv.collect_expired(self.kv.now(), max(self.ttl.cleanup_size, 1) * 10)

    def before_commit(self, store_snapshots: bool) -> int:
        """Cleanup at commit: every expired entry if the commit snapshots and full-snapshot
        cleanup is on; else the collected background candidates plus a bounded sweep."""
        now = self.kv.now()
        if store_snapshots and self.ttl.cleanup_full_snapshot:
            self._candidates = []
            return self.kv.sweep_all(now)
        removed = 0
        if self._candidates:
            removed += self.kv.expire(self._candidates, now)
            self._candidates = []
        if self.ttl.cleanup_size:
            removed += self.kv.sweep(now, self.ttl.cleanup_size)
        return removed
