"""Options of the Spark provider that are not engine options, in one place.

They are set like every spark-state option (``spark.sql.streaming.stateStore.sparkState.<key>``,
or ``spark_state.configure(builder, options={...})``) but are read by the JVM shim or by the
worker's fault injection, never by :class:`~spark_state.config.EngineConfig`:

``workersPerExecutor``
    Python workers per executor JVM (default: the executor's task slots, at most 4). Read by
    ``PythonWorker.scala`` when the executor starts its first worker.
``testing.crashOnCommit``
    Fault injection for tests, ``<version>:<marker dir>:once|always``: a worker exits abruptly
    while committing ``<version>``. Never set it in production.
"""

from __future__ import annotations

import re
from typing import Mapping

from ..constants import CONF_PREFIX
from ..errors import ConfigError

WORKERS_PER_EXECUTOR = "workersPerExecutor"
CRASH_ON_COMMIT = "testing.crashOnCommit"
PROVIDER_ONLY = (WORKERS_PER_EXECUTOR, CRASH_ON_COMMIT)
#: Upper bound of workersPerExecutor: more workers than that only cost memory.
MAX_WORKERS_PER_EXECUTOR = 64

_CRASH_SPEC = re.compile(r"^\d+:.+:(once|always)$")


def split_provider_options(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(provider-only options, the rest)``."""
    mine = {k: str(v) for k, v in options.items() if k in PROVIDER_ONLY}
    rest = {k: str(v) for k, v in options.items() if k not in PROVIDER_ONLY}
    return mine, rest


def validate_provider_options(options: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` naming the conf for a value the shim or worker cannot use."""
    if WORKERS_PER_EXECUTOR in options:
        raw = str(options[WORKERS_PER_EXECUTOR]).strip()
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_WORKERS_PER_EXECUTOR:
            raise ConfigError(
                f"option {CONF_PREFIX}{WORKERS_PER_EXECUTOR} must be a whole number of Python workers "
                f"per executor, 1 to {MAX_WORKERS_PER_EXECUTOR}, got {options[WORKERS_PER_EXECUTOR]!r}")
    if CRASH_ON_COMMIT in options and not _CRASH_SPEC.match(str(options[CRASH_ON_COMMIT]).strip()):
        raise ConfigError(
            f"option {CONF_PREFIX}{CRASH_ON_COMMIT} (testing only) must be <version>:<marker dir>:once|always, "
            f"got {options[CRASH_ON_COMMIT]!r}")
