"""Engine configuration: one immutable, validated object built from keyword arguments or
from string options (``spark.sql.streaming.stateStore.sparkState.*`` confs).

Unknown options are errors, not silently ignored: a typo in a conf name would otherwise
leave a user running with defaults they did not choose.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from . import constants as C
from . import options as option_specs
from .errors import ConfigError
from .memory import DEFAULT_SPILL_THRESHOLD, parse_size

#: String option name -> (field name, parser); the table is :data:`spark_state.options.OPTIONS`
#: (names, defaults and meanings, from which docs/configuration.md is generated).
_INT = "int"
_BOOL = "bool"
_STR = "str"
_SIZE = "size"

_OPTIONS: dict[str, tuple[str, str]] = option_specs.engine_options()
#: Options with this prefix are handed to checkpoint storage with the prefix removed
#: (``storage.s3.endpoint_url`` -> ``s3.endpoint_url``); :meth:`EngineConfig.from_options` checks
#: their names and values with the storage layer's own checks.
STORAGE_OPTION_PREFIX = "storage."


@dataclass(frozen=True)
class EngineConfig:
    """How a :class:`~spark_state.engine.store.VersionedStore` keeps its state.

    Attributes:
        backend: ``"rocksdb"`` (rocksdict, raw bytes; state may exceed memory) or
            ``"hashmap"`` (a Python dict; fastest, state must fit in memory).
        snapshot_interval: take a snapshot every this many commits; ``0`` never takes one
            automatically (restores then replay every changelog since version 0).
        retained_versions: how many most recent versions stay restorable; older files
            are removed by cleanup.
        local_dir: parent directory of the working copies of stores; ``None`` uses a
            temporary directory of this process.
        block_cache_mb / write_buffer_mb: the process-wide RocksDB memory budget, shared
            by every RocksDB store in the process.
        compaction_nice: the nice value (0-19) RocksDB's compaction threads run at, so that
            compactions use the CPU that tasks leave idle; ``0`` leaves them as they are.
            Process-wide (the threads are shared): the lowest priority asked for wins.
        rocksdb_wal: write RocksDB's own write-ahead log. Off by default: durability comes
            from our changelog, written before a commit returns.
        spill_threshold_bytes: bytes (estimated) an epoch's pending writes of one store may hold
            in memory before they spill to local disk (:mod:`spark_state.engine.overlay`).
        load_warn_after_ms: a load slower than this logs what it waited for; ``0``: never.
        storage_options: options for checkpoint storage (``s3.endpoint_url``, ...).
    """

    backend: str = C.DEFAULT_BACKEND
    snapshot_interval: int = C.DEFAULT_SNAPSHOT_INTERVAL
    retained_versions: int = C.DEFAULT_RETAINED_VERSIONS
    local_dir: Optional[str] = None
    block_cache_mb: int = C.DEFAULT_BLOCK_CACHE_MB
    write_buffer_mb: int = C.DEFAULT_WRITE_BUFFER_MB
    compaction_nice: int = C.DEFAULT_COMPACTION_NICE
    rocksdb_wal: bool = False
    spill_threshold_bytes: int = DEFAULT_SPILL_THRESHOLD
    load_warn_after_ms: int = C.DEFAULT_LOAD_WARN_AFTER_MS
    storage_options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        object.__setattr__(self, "storage_options", dict(self.storage_options))

    def replace(self, **changes: Any) -> "EngineConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_options(cls, options: Mapping[str, str], prefix: str = "") -> "EngineConfig":
        """Build from string options, e.g. Spark confs.

        Only keys starting with ``prefix`` are considered; pass
        ``prefix=constants.CONF_PREFIX`` for a full Spark conf map. Unknown keys raise
        :class:`ConfigError` listing the known ones; so do checkpoint storage options
        (``storage.*``) with an unknown name or a bad value (see :func:`check_storage_options`),
        here rather than when a store first opens its storage.
        """
        kwargs: dict[str, Any] = {}
        storage: dict[str, str] = {}
        for full_key, raw in options.items():
            if not full_key.startswith(prefix):
                continue
            key = full_key[len(prefix):]
            if option_specs.read_elsewhere(key):  # e.g. process.root: a conf of the Python API
                continue
            if key.startswith(STORAGE_OPTION_PREFIX):
                storage[key[len(STORAGE_OPTION_PREFIX):]] = str(raw)
                continue
            if key not in _OPTIONS:
                known = ", ".join(prefix + k for k in sorted(_OPTIONS))
                raise ConfigError(
                    f"unknown spark-state option {full_key!r}; known options: {known}, "
                    f"and {prefix}{STORAGE_OPTION_PREFIX}* for checkpoint storage"
                )
            field_name, kind = _OPTIONS[key]
            kwargs[field_name] = _parse(full_key, str(raw).strip(), kind)
        if storage:
            check_storage_options(storage, prefix + STORAGE_OPTION_PREFIX)
            kwargs["storage_options"] = storage
        # Checked here too, before the constructor checks them again, so that a message names the
        # option as the caller wrote it (with ``prefix``: the conf).
        _check({**_DEFAULTS, **kwargs}, prefix)
        return cls(**kwargs)


#: Field values of a default EngineConfig (fields with a default factory excepted).
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(EngineConfig)
                             if f.default is not dataclasses.MISSING}
#: EngineConfig field -> its option name.
_OPTION_OF: dict[str, str] = {field_name: key for key, (field_name, _) in _OPTIONS.items()}


def _check(values: Mapping[str, Any], given_as: str = "") -> None:
    """The rules of the engine's option values, in one place: ``values`` by ``EngineConfig`` field
    name; a message names the option as ``given_as`` + its name and gives the bad value."""
    def name(field_name: str) -> str:
        return given_as + _OPTION_OF[field_name]

    for key, (field_name, _) in _OPTIONS.items():
        choices = option_specs.spec(key).choices
        if choices and values[field_name] not in choices:
            raise ConfigError(f"option {name(field_name)!r} must be one of {', '.join(choices)}, "
                              f"got {values[field_name]!r}")
    _require_int(name("snapshot_interval"), values["snapshot_interval"], minimum=0)
    _require_int(name("retained_versions"), values["retained_versions"], minimum=1)
    _require_int(name("block_cache_mb"), values["block_cache_mb"], minimum=1)
    _require_int(name("write_buffer_mb"), values["write_buffer_mb"], minimum=1)
    _require_int(name("compaction_nice"), values["compaction_nice"], minimum=0)
    _require_int(name("spill_threshold_bytes"), values["spill_threshold_bytes"], minimum=1)
    _require_int(name("load_warn_after_ms"), values["load_warn_after_ms"], minimum=0)
    if values["compaction_nice"] > C.MAX_NICE:
        raise ConfigError(f"option {name('compaction_nice')!r} must be a nice value from 0 to {C.MAX_NICE} "
                          f"(0 leaves RocksDB's compaction threads as they are), got {values['compaction_nice']}")
    if values["write_buffer_mb"] > values["block_cache_mb"]:
        raise ConfigError(
            f"{name('write_buffer_mb')} ({values['write_buffer_mb']}) must not exceed "
            f"{name('block_cache_mb')} ({values['block_cache_mb']}): memtables are charged "
            "to the shared block cache"
        )


def check_storage_options(storage: Mapping[str, str], given_as: str = "") -> None:
    """Check checkpoint storage options (keys without ``storage.``) the way
    :func:`~spark_state.storage.open_storage` does, without opening any storage
    (:func:`spark_state.storage.factory.check_options`). ``given_as`` is the prefix the caller
    wrote the keys with (``storage.``), so that the message names the option as given.

    Raises:
        ConfigError: naming the option as given and what is wrong with it.
    """
    # Imported here: building a config needs no storage client, and a module-level import would
    # tie the import orders of the two packages.
    from .storage.factory import check_options

    for key, value in storage.items():
        try:
            check_options({key: value}, together=False)
        except ConfigError as exc:
            raise ConfigError(f"option {given_as + str(key)!r}: {exc}") from None
    try:
        check_options(storage)
    except ConfigError as exc:
        raise ConfigError(f"options {given_as}s3.*: {exc}") from None


def _parse(key: str, raw: str, kind: str) -> Any:
    if kind == _INT:
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"option {key!r} must be an integer, got {raw!r}") from None
    if kind == _BOOL:
        value = option_specs.parse_bool(raw)
        if value is None:
            raise ConfigError(f"option {key!r} must be true or false, got {raw!r}")
        return value
    if kind == _SIZE:
        try:
            return parse_size(raw)
        except ValueError:
            raise ConfigError(f"option {key!r} must be a size such as 64m, 1g or a number of bytes, "
                              f"got {raw!r}") from None
    return raw


def _require_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"option {name!r} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"option {name!r} must be >= {minimum}, got {value}")
