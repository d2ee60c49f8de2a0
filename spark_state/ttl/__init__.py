"""Flink-style state TTL: configuration, clocks, byte layouts and the cleanup machinery.

* :mod:`.config` -- :class:`TtlConfig` and its builder, ``UpdateType``, ``StateVisibility``.
* :mod:`.clock` -- processing-time sources; :class:`ManualClock` for tests.
* :mod:`.codec` -- the stamped value layout and expiry time rules (index and marker *keys*:
  :mod:`spark_state.keys.system`).
* :mod:`.kv` -- :class:`TtlKeyValue`, the decorator over a store that enforces all of it.
"""

from __future__ import annotations

from .clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock
from .config import (
    DEFAULT_CLEANUP_SIZE,
    StateVisibility,
    TimeCharacteristic,
    TtlConfig,
    TtlConfigBuilder,
    UpdateType,
    parse_duration_ms,
)
from .kv import PRIOR_ABSENT, PRIOR_UNKNOWN, TtlKeyValue, TtlStats, is_stamped, migrate_layout

__all__ = [
    "Clock", "SystemClock", "ManualClock", "SYSTEM_CLOCK",
    "TtlConfig", "TtlConfigBuilder", "UpdateType", "StateVisibility", "TimeCharacteristic",
    "DEFAULT_CLEANUP_SIZE", "parse_duration_ms",
    "TtlKeyValue", "TtlStats", "PRIOR_UNKNOWN", "PRIOR_ABSENT", "is_stamped", "migrate_layout",
]
