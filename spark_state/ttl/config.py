"""TTL configuration in Flink's vocabulary (``StateTtlConfig``), Python style.

    ttl = (TtlConfig.builder("10 minutes")            # or timedelta / milliseconds
           .update_type(UpdateType.ON_READ_AND_WRITE)
           .visibility(StateVisibility.NEVER_RETURN_EXPIRED)
           .cleanup_incrementally(10_000)
           .build())

Semantics, as in Flink: every value (and every list element and map entry) carries the
time it was last accessed; it is *expired* once ``last access + ttl <= now``.

* ``UpdateType`` says which accesses refresh the time: ``ON_CREATE_AND_WRITE`` (default)
  or ``ON_READ_AND_WRITE``; ``DISABLED`` turns TTL off (``TtlConfig.DISABLED``).
* ``StateVisibility``: ``NEVER_RETURN_EXPIRED`` (default) makes an expired entry behave
  as absent; ``RETURN_EXPIRED_IF_NOT_CLEANED_UP`` may return it while it still exists.
  Either way, an expired entry that is read is then removed (cleanup on read).
* Only processing time is supported (``TimeCharacteristic.PROCESSING_TIME``).
* Cleanup, besides on read: an incremental sweep at every commit of at most
  ``cleanup_size`` expirations, driven by an expiry index (on by default); full-snapshot
  cleanup (a commit that takes a snapshot first removes *every* expired entry, so
  snapshots hold none); background cleanup during maintenance (on by default).

A config is immutable; the builder validates and raises ``ConfigError`` on bad input.
The clock is injectable for tests (:class:`~spark_state.ttl.clock.ManualClock`).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional, Union

from ..errors import ConfigError
from .clock import SYSTEM_CLOCK, Clock

DurationLike = Union[int, float, str, timedelta]

#: Default bound of the incremental sweep at commit (expired entries removed per commit).
DEFAULT_CLEANUP_SIZE = 100_000


class UpdateType(enum.Enum):
    """Which accesses refresh an entry's last-access time (Flink ``StateTtlConfig.UpdateType``)."""

    DISABLED = "Disabled"
    ON_CREATE_AND_WRITE = "OnCreateAndWrite"
    ON_READ_AND_WRITE = "OnReadAndWrite"


class StateVisibility(enum.Enum):
    """Whether a read may return an expired entry that is not cleaned up yet."""

    NEVER_RETURN_EXPIRED = "NeverReturnExpired"
    RETURN_EXPIRED_IF_NOT_CLEANED_UP = "ReturnExpiredIfNotCleanedUp"


class TimeCharacteristic(enum.Enum):
    """The time TTL is measured in. As in Flink, only processing time."""

    PROCESSING_TIME = "ProcessingTime"


def _parse_enum(kind: type[enum.Enum], value: object, what: str) -> enum.Enum:
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        wanted = value.replace("_", "").replace("-", "").lower()
        for member in kind:
            if wanted in (member.value.lower(), member.name.replace("_", "").lower()):
                return member
    names = ", ".join(m.value for m in kind)
    raise ConfigError(f"{what} must be one of {names}; got {value!r}")


_UNITS_MS = {
    "ms": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration_ms(value: DurationLike, what: str = "TTL") -> int:
    """Milliseconds of a duration: a ``timedelta``, a number of milliseconds, or a string
    such as ``"90s"``, ``"10 minutes"``, ``"1h"``, ``"250 ms"`` (bare numbers are ms)."""
    if isinstance(value, bool):
        raise ConfigError(f"{what} must be a duration, got {value!r}")
    if isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
    elif isinstance(value, (int, float)):
        ms = float(value)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        unit = match.group(2).lower() if match else None
        if not match or (unit and unit not in _UNITS_MS):
            raise ConfigError(
                f"{what} {value!r} is not a duration; write e.g. '30s', '10 minutes', '2h' or '1500ms'"
            )
        ms = float(match.group(1)) * _UNITS_MS[unit or "ms"]
    else:
        raise ConfigError(f"{what} must be a duration (timedelta, milliseconds or e.g. '10 minutes'), got {value!r}")
    if ms != ms or ms <= 0:  # NaN or non-positive
        raise ConfigError(f"{what} must be positive, got {value!r}")
    if ms < 1:
        raise ConfigError(f"{what} must be at least 1 ms, got {value!r}")
    return int(ms)


@dataclass(frozen=True)
class TtlConfig:
    """An immutable TTL configuration; build one with :meth:`builder`.

    Attributes:
        ttl_ms: time to live in milliseconds (> 0).
        update_type: which accesses refresh the last-access time.
        visibility: whether expired, not yet cleaned entries may be returned.
        time_characteristic: always processing time.
        cleanup_size: most expired entries the incremental sweep removes per commit
            (``0``: no incremental sweep).
        cleanup_full_snapshot: a commit that takes a snapshot removes every expired entry first.
        cleanup_in_background: maintenance collects expired entries for the next commit.
        clock: where "now" comes from.
    """

    ttl_ms: int
    update_type: UpdateType = UpdateType.ON_CREATE_AND_WRITE
    visibility: StateVisibility = StateVisibility.NEVER_RETURN_EXPIRED
    time_characteristic: TimeCharacteristic = TimeCharacteristic.PROCESSING_TIME
    cleanup_size: int = DEFAULT_CLEANUP_SIZE
    cleanup_full_snapshot: bool = False
    cleanup_in_background: bool = True
    clock: Clock = dataclasses.field(default=SYSTEM_CLOCK, compare=False)

    def __post_init__(self) -> None:
        if self.update_type is not UpdateType.DISABLED:
            if isinstance(self.ttl_ms, bool) or not isinstance(self.ttl_ms, int) or self.ttl_ms <= 0:
                raise ConfigError(f"TTL must be a positive number of milliseconds, got {self.ttl_ms!r}")
        if isinstance(self.cleanup_size, bool) or not isinstance(self.cleanup_size, int) or self.cleanup_size < 0:
            raise ConfigError(f"cleanup size must be a non-negative integer, got {self.cleanup_size!r}")
        if not isinstance(self.clock, Clock):
            raise ConfigError(f"clock must have a now_ms() method, got {self.clock!r}")

    @staticmethod
    def builder(ttl: DurationLike) -> "TtlConfigBuilder":
        """Start a config with time to live ``ttl`` (timedelta, milliseconds, or e.g. ``"10 min"``)."""
        return TtlConfigBuilder(ttl)

    @property
    def enabled(self) -> bool:
        return self.update_type is not UpdateType.DISABLED

    @property
    def refresh_on_read(self) -> bool:
        return self.update_type is UpdateType.ON_READ_AND_WRITE

    @property
    def return_expired(self) -> bool:
        return self.visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def with_clock(self, clock: Clock) -> "TtlConfig":
        return dataclasses.replace(self, clock=clock)

    def describe(self) -> str:
        if not self.enabled:
            return "TTL disabled"
        return (f"TTL {self.ttl_ms} ms, {self.update_type.value}, {self.visibility.value}, "
                f"incremental cleanup {self.cleanup_size}/commit, full-snapshot cleanup "
                f"{'on' if self.cleanup_full_snapshot else 'off'}, background cleanup "
                f"{'on' if self.cleanup_in_background else 'off'}")


class TtlConfigBuilder:
    """Builds a :class:`TtlConfig` (Flink's ``StateTtlConfig.newBuilder``)."""

    def __init__(self, ttl: DurationLike) -> None:
        self._fields: dict[str, object] = {"ttl_ms": parse_duration_ms(ttl)}

    def ttl(self, ttl: DurationLike) -> "TtlConfigBuilder":
        self._fields["ttl_ms"] = parse_duration_ms(ttl)
        return self

    def update_type(self, update_type: Union[UpdateType, str]) -> "TtlConfigBuilder":
        self._fields["update_type"] = _parse_enum(UpdateType, update_type, "TTL update type")
        return self

    def update_ttl_on_create_and_write(self) -> "TtlConfigBuilder":
        return self.update_type(UpdateType.ON_CREATE_AND_WRITE)

    def update_ttl_on_read_and_write(self) -> "TtlConfigBuilder":
        return self.update_type(UpdateType.ON_READ_AND_WRITE)

    def visibility(self, visibility: Union[StateVisibility, str]) -> "TtlConfigBuilder":
        self._fields["visibility"] = _parse_enum(StateVisibility, visibility, "TTL state visibility")
        return self

    def never_return_expired(self) -> "TtlConfigBuilder":
        return self.visibility(StateVisibility.NEVER_RETURN_EXPIRED)

    def return_expired_if_not_cleaned_up(self) -> "TtlConfigBuilder":
        return self.visibility(StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)

    def time_characteristic(self, characteristic: Union[TimeCharacteristic, str]) -> "TtlConfigBuilder":
        self._fields["time_characteristic"] = _parse_enum(
            TimeCharacteristic, characteristic, "TTL time characteristic (event time is not supported)")
        return self

    def cleanup_incrementally(self, cleanup_size: int) -> "TtlConfigBuilder":
        """Remove at most ``cleanup_size`` expired entries per commit (must be > 0)."""
        if isinstance(cleanup_size, bool) or not isinstance(cleanup_size, int) or cleanup_size <= 0:
            raise ConfigError(f"incremental cleanup size must be a positive integer, got {cleanup_size!r}")
        self._fields["cleanup_size"] = cleanup_size
        return self

    def disable_cleanup_incrementally(self) -> "TtlConfigBuilder":
        self._fields["cleanup_size"] = 0
        return self

    def cleanup_full_snapshot(self) -> "TtlConfigBuilder":
        self._fields["cleanup_full_snapshot"] = True
        return self

    def disable_cleanup_in_background(self) -> "TtlConfigBuilder":
        self._fields["cleanup_in_background"] = False
        return self

    def clock(self, clock: Clock) -> "TtlConfigBuilder":
        """Inject the processing-time source (tests: a ``ManualClock``)."""
        self._fields["clock"] = clock
        return self

    def build(self) -> TtlConfig:
        return TtlConfig(**self._fields)  # type: ignore[arg-type]


#: TTL turned off (Flink's ``StateTtlConfig.DISABLED``).
TtlConfig.DISABLED = TtlConfig(ttl_ms=1 << 62, update_type=UpdateType.DISABLED)  # type: ignore[attr-defined]


def ttl_or_none(config: Optional[TtlConfig]) -> Optional[TtlConfig]:
    """``config`` if it enables TTL, else None."""
    return config if config is not None and config.enabled else None
