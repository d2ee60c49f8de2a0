"""Which TTL a store of Spark's built-in operators gets: the provider's TTL confs, resolved
for one (operator, store).

Confs, all under ``spark.sql.streaming.stateStore.sparkState.`` (names below are relative)::

    ttl                       default TTL of every stateful operator: a duration such as
                              "10 minutes", "90s", "1h" or "1500ms"; "none" (default): off
    ttl.operator.<id>         per-operator override: a duration, or "none" to exempt it
    ttl.updateType            OnCreateAndWrite (default) | OnReadAndWrite
    ttl.visibility            NeverReturnExpired (default) | ReturnExpiredIfNotCleanedUp
    ttl.cleanupSize           expired rows removed per commit at most (default 100000; 0: none)
    ttl.fullSnapshotCleanup   true: a commit that takes a snapshot first removes every
                              expired row (default false)
    ttl.backgroundCleanup     true (default): maintenance finds expired rows between
                              batches, and the next commit removes them
    ttl.testing.clock         testing only: "batch:<stepMs>" makes processing time
                              = loaded version x stepMs, so tests are deterministic;
                              "system" (default) is the wall clock. Never set it in production.

``<id>`` is Spark's operator id: the ``operatorId`` column of
``spark.read.format("state-metadata").load(checkpoint)``, also the ``<id>`` in the
checkpoint's ``state/<id>/`` directories.

Stream-stream joins keep one row in four stores that reference each other (a count per key,
and the rows by (key, index)); expiring their rows independently would corrupt the join.
So stores with a name other than ``default`` -- in Spark 4.3 only joins have them -- never
get TTL: the global default skips them (logged), and an override that targets one fails
with a message that says so.

Every TTL conf is validated for every store, exempt or not, so a typo fails the query at
once rather than when some operator happens to use it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from .. import constants as C
from ..errors import ConfigError
from ..options import parse_bool
from ..ttl import SYSTEM_CLOCK, TtlConfig
from ..ttl.config import DEFAULT_CLEANUP_SIZE, StateVisibility, UpdateType, parse_duration_ms

_LOG = logging.getLogger(__name__)

TTL = "ttl"
UPDATE_TYPE = "ttl.updateType"
VISIBILITY = "ttl.visibility"
CLEANUP_SIZE = "ttl.cleanupSize"
FULL_SNAPSHOT_CLEANUP = "ttl.fullSnapshotCleanup"
BACKGROUND_CLEANUP = "ttl.backgroundCleanup"
TESTING_CLOCK = "ttl.testing.clock"
OPERATOR_PREFIX = "ttl.operator."
KNOWN = (TTL, UPDATE_TYPE, VISIBILITY, CLEANUP_SIZE, FULL_SNAPSHOT_CLEANUP, BACKGROUND_CLEANUP, TESTING_CLOCK)

#: The store name of single-store operators; the only stores that can get TTL.
DEFAULT_STORE = "default"
_OFF = ("none", "off", "false", "disabled")
_JOIN_STORE = re.compile(r"^(left|right)-(keyToNumValues|keyWithIndexToValue)$")
_BATCH_CLOCK = re.compile(r"^batch:(\d+)$")

#: (operator id, store name) pairs whose exemption was logged already, to log it once.
_logged_exempt: set[tuple[int, str]] = set()


def is_ttl_option(key: str) -> bool:
    """Whether ``key`` (relative to the conf prefix) is a TTL conf."""
    return key == TTL or key.startswith(TTL + ".")


def split_ttl_options(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(TTL confs, the other confs)`` of a spark-state option map (keys without the prefix)."""
    ttl: dict[str, str] = {}
    rest: dict[str, str] = {}
    for key, value in options.items():
        (ttl if is_ttl_option(key) else rest)[key] = value
    return ttl, rest


def _name(key: str) -> str:
    return C.CONF_PREFIX + key


class BatchClock:
    """Testing only: processing time = loaded version x ``step_ms`` (deterministic TTL tests)."""

    def __init__(self, step_ms: int) -> None:
        self.step_ms = step_ms

    def __repr__(self) -> str:
        return f"BatchClock({self.step_ms} ms per version)"


@dataclass(frozen=True)
class TtlSettings:
    """The validated TTL confs of a query (not yet resolved for a store)."""

    default_ttl_ms: Optional[int]
    #: operator id -> TTL in ms, or None for "none" (exempt)
    overrides: Mapping[int, Optional[int]]
    update_type: UpdateType
    visibility: StateVisibility
    cleanup_size: int
    full_snapshot_cleanup: bool
    background_cleanup: bool
    batch_clock: Optional[BatchClock]

    @property
    def any_enabled(self) -> bool:
        return self.default_ttl_ms is not None or any(v is not None for v in self.overrides.values())


def _duration_or_none(key: str, raw: str) -> Optional[int]:
    text = str(raw).strip()
    if text.lower() in _OFF:
        return None
    return parse_duration_ms(text, what=f"option {_name(key)!r}")


def _bool(key: str, raw: str) -> bool:
    value = parse_bool(raw)
    if value is None:
        raise ConfigError(f"option {_name(key)!r} must be true or false, got {raw!r}")
    return value


def _enum(kind, key: str, raw: str):
    text = str(raw).strip().replace("_", "").replace("-", "").lower()
    choices = [m for m in kind if m is not UpdateType.DISABLED]
    for member in choices:
        if text == member.value.lower():
            return member
    raise ConfigError(
        f"option {_name(key)!r} must be one of {', '.join(m.value for m in choices)}; got {raw!r}"
    )


def parse_settings(options: Mapping[str, str]) -> TtlSettings:
    """Validate the TTL confs of ``options`` (keys relative to the conf prefix; other keys
    are ignored). Raises :class:`ConfigError` naming the conf at fault."""
    overrides: dict[int, Optional[int]] = {}
    for key, raw in options.items():
        if not is_ttl_option(key) or key in KNOWN:
            continue
        if key.startswith(OPERATOR_PREFIX):
            op = key[len(OPERATOR_PREFIX):]
            if not op.isdigit():
                raise ConfigError(
                    f"option {_name(key)!r}: {op!r} is not an operator id; write "
                    f"{_name(OPERATOR_PREFIX)}<operatorId>, with the operatorId column of "
                    f"spark.read.format(\"state-metadata\").load(<checkpoint>)"
                )
            overrides[int(op)] = _duration_or_none(key, raw)
            continue
        known = ", ".join(_name(k) for k in KNOWN)
        raise ConfigError(f"unknown spark-state TTL option {_name(key)!r}; known TTL options: {known}, "
                          f"and {_name(OPERATOR_PREFIX)}<operatorId>")
    default = _duration_or_none(TTL, options[TTL]) if TTL in options else None
    update_type = _enum(UpdateType, UPDATE_TYPE, options[UPDATE_TYPE]) if UPDATE_TYPE in options \
        else UpdateType.ON_CREATE_AND_WRITE
    visibility = _enum(StateVisibility, VISIBILITY, options[VISIBILITY]) if VISIBILITY in options \
        else StateVisibility.NEVER_RETURN_EXPIRED
    cleanup_size = DEFAULT_CLEANUP_SIZE
    if CLEANUP_SIZE in options:
        try:
            cleanup_size = int(str(options[CLEANUP_SIZE]).strip())
        except ValueError:
            cleanup_size = -1
        if cleanup_size < 0:
            raise ConfigError(f"option {_name(CLEANUP_SIZE)!r} must be a non-negative integer "
                              f"(0: no incremental cleanup), got {options[CLEANUP_SIZE]!r}")
    full = _bool(FULL_SNAPSHOT_CLEANUP, options[FULL_SNAPSHOT_CLEANUP]) if FULL_SNAPSHOT_CLEANUP in options else False
    background = _bool(BACKGROUND_CLEANUP, options[BACKGROUND_CLEANUP]) if BACKGROUND_CLEANUP in options else True
    clock = None
    if TESTING_CLOCK in options:
        text = str(options[TESTING_CLOCK]).strip()
        match = _BATCH_CLOCK.match(text)
        if match and int(match.group(1)) > 0:
            clock = BatchClock(int(match.group(1)))
        elif text != "system":
            raise ConfigError(f"option {_name(TESTING_CLOCK)!r} (testing only) must be 'system' or "
                              f"'batch:<stepMs>' with stepMs > 0, got {text!r}")
    return TtlSettings(default, overrides, update_type, visibility, cleanup_size, full, background, clock)


@dataclass(frozen=True)
class StoreTtl:
    """The TTL of one store: ``config`` is None when the store keeps no TTL."""

    config: Optional[TtlConfig]
    batch_clock: Optional[BatchClock] = None
    #: why the store has no TTL although some is configured (for logs), else ""
    exempt_reason: str = ""

    @property
    def enabled(self) -> bool:
        return self.config is not None

    def now_ms(self, loaded_version: int) -> int:
        """Processing time for a batch that loaded ``loaded_version`` (taken once per batch)."""
        if self.batch_clock is not None:
            return loaded_version * self.batch_clock.step_ms
        return self.config.now_ms() if self.config is not None else SYSTEM_CLOCK.now_ms()


def resolve(options: Mapping[str, str], operator_id: Optional[int], store_name: str) -> StoreTtl:
    """The TTL of store ``store_name`` of operator ``operator_id`` (None: unknown, e.g. an
    older shim; only the default applies then)."""
    settings = parse_settings(options)
    store_name = store_name or DEFAULT_STORE
    has_override = operator_id is not None and operator_id in settings.overrides
    ttl_ms = settings.overrides[operator_id] if has_override else settings.default_ttl_ms  # type: ignore[index]
    if ttl_ms is None:
        return StoreTtl(None)
    if store_name != DEFAULT_STORE:
        kind = "a stream-stream join" if _JOIN_STORE.match(store_name) else "an operator with several stores"
        if has_override:
            raise ConfigError(
                f"option {_name(OPERATOR_PREFIX)}{operator_id} sets a TTL for operator {operator_id}, "
                f"{kind} (store {store_name!r}). spark-state does not expire join state: the join's "
                f"stores reference each other (a row count per key and the rows by index), and "
                f"expiring their rows independently would corrupt the join. Bound join state with "
                f"watermarks on both sides instead, and remove this option or set it to 'none'."
            )
        reason = (f"TTL not applied to store {store_name!r} of operator {operator_id}: {kind} keeps "
                  f"rows in several stores that reference each other; bound its state with watermarks")
        key = (operator_id if operator_id is not None else -1, store_name)
        if key not in _logged_exempt:
            _logged_exempt.add(key)
            _LOG.info("%s", reason)
        return StoreTtl(None, exempt_reason=reason)
    config = TtlConfig(
        ttl_ms=ttl_ms,
        update_type=settings.update_type,
        visibility=settings.visibility,
        cleanup_size=settings.cleanup_size,
        cleanup_full_snapshot=settings.full_snapshot_cleanup,
        cleanup_in_background=settings.background_cleanup,
    )
    return StoreTtl(config, settings.batch_clock)


def check_overrides_name_operators(options: Mapping[str, str], operator_exists: Callable[[int], bool]) -> None:
    """Fail when a ``ttl.operator.<id>`` override names no stateful operator of the query:
    a typo would otherwise leave that operator's state growing forever without a word.

    ``operator_exists(id)`` tells whether the query's checkpoint has operator ``id`` (Spark
    writes an operator's metadata on the driver when it plans the first batch, before any task).
    """
    overrides = parse_settings(options).overrides
    missing = sorted(op for op in overrides if not operator_exists(op))
    if not missing:
        return
    present = [op for op in range(max(max(overrides), 8) + 1) if operator_exists(op)]
    raise ConfigError(
        f"option {_name(OPERATOR_PREFIX)}{missing[0]} sets the TTL of operator {missing[0]}, but this "
        f"query has no stateful operator with that id (its operators: "
        f"{', '.join(map(str, present)) or 'none found'}). Operator ids are the operatorId column of "
        f"spark.read.format(\"state-metadata\").load(<checkpoint>) and the directory names under "
        f"<checkpoint>/state/; fix or remove the option."
    )
