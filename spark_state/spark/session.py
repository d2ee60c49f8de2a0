"""Wire spark-state into a ``SparkSession.Builder``: one call sets every conf it needs."""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional, TypeVar

from .. import constants as C
from ..config import EngineConfig
from .connect import remote_url
from ..errors import ConfigError, ConnectUnsupportedError
from . import jvm
from ..provider.options import split_provider_options, validate_provider_options
from ..provider.ttl_policy import parse_settings as parse_ttl_settings, split_ttl_options

__all__ = ["configure", "server_confs"]

#: Spark's conf naming the state store provider class.
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
#: Spark's list of plugin classes (comma-separated), where spark-state's goes.
PLUGINS_CONF = "spark.plugins"
#: Spark's list of session extension classes (comma-separated), where spark-state's goes.
EXTENSIONS_CONF = "spark.sql.extensions"
#: Spark's default (true) lets a second start of a running query *stop* the running one; we
#: make it fail instead, so that a second copy started by mistake cannot harm the first.
STOP_ACTIVE_RUN_CONF = "spark.sql.streaming.stopActiveRunOnRestart"

B = TypeVar("B")


def configure(
    builder: B,
    *,
    backend: Optional[str] = None,
    options: Optional[Mapping[str, str]] = None,
    python: Optional[str] = None,
) -> B:
    """Make a ``SparkSession.Builder`` run stateful queries on spark-state.

    Sets, on ``builder`` (which is returned, for chaining):

    * ``spark.jars`` += the JVM shim jar (built on first use, see :mod:`spark_state.spark.jvm`);
      a value already set *on this builder* is kept and the jar appended to it;
    * ``spark.sql.streaming.stateStore.providerClass`` = :data:`spark_state.spark.jvm.PROVIDER_CLASS`;
    * ``spark.plugins`` += :data:`spark_state.spark.jvm.PLUGIN_CLASS`, which starts each executor's
      Python workers when the executor starts, so the first micro-batch does not wait for them
      (option ``prestartWorkers=false`` keeps them lazy); plugins already set on this builder
      are kept;
    * ``spark.sql.extensions`` += :data:`spark_state.spark.jvm.EXTENSIONS_CLASS`, which shows each
      keyed or checkpointed function in the Spark UI's SQL tab with its state figures
      (``SparkStateFunction <name>``); extensions already set on this builder are kept;
    * ``spark.pyspark.python`` = ``python`` or ``sys.executable`` (and the environment
      variable ``PYSPARK_PYTHON`` when unset), so that the Python workers the provider
      starts can import spark_state;
    * ``spark.sql.streaming.stopActiveRunOnRestart`` = ``false`` unless set on the builder:
      starting a query that is already running (same checkpoint) in this application fails
      with Spark's "another query with same id is already active" instead of stopping the
      running one (a second application is stopped by spark-state's own single-writer check);
    * ``spark.sql.streaming.stateStore.sparkState.backend`` = ``backend`` when given;
    * ``spark.sql.streaming.stateStore.sparkState.<key>`` = value for every ``options``
      item (keys as in :meth:`EngineConfig.from_options`, the TTL confs ``ttl``, ``ttl.*``, or
      the provider's own ``workersPerExecutor``; e.g. ``snapshotInterval``,
      ``storage.s3.endpoint_url``).

    ``backend`` and ``options`` are validated before the builder is touched, so a typo
    raises :class:`~spark_state.errors.ConfigError` here rather than in an executor -- the
    checkpoint storage options (``storage.*``) too: their names, and the values the storage
    layer checks (``storage.retry.*``, ``storage.s3.anonymous``, ``storage.s3.*_timeout``).

    The confs only take effect when ``getOrCreate()`` starts a new SparkContext: a session
    already running in this process keeps its jars. A ``spark.jars`` from
    ``spark-defaults.conf`` is replaced, as with any ``builder.config("spark.jars", ...)``.

    Spark Connect: a builder for an ``sc://`` server (``.remote(url)``, ``SPARK_REMOTE``)
    raises :class:`~spark_state.errors.ConnectUnsupportedError` -- that server is a driver
    started already; give it :func:`server_confs` when it starts. ``.remote("local...")``
    works: pyspark starts that server here, with the builder's confs.

    Example::

        from pyspark.sql import SparkSession
        import spark_state

        spark = spark_state.configure(
            SparkSession.builder.master("local[2]").appName("sessions"),
            backend="rocksdb",
            options={"snapshotInterval": "20", "retainedVersions": "50"},
        ).getOrCreate()
    """
    url = remote_url(builder)
    if url is not None:
        raise ConnectUnsupportedError(
            f"spark_state.configure() sets the confs a Spark driver starts with, but this builder connects to "
            f"the Spark Connect server {url}, which is the driver and is running already: its jars and state "
            "store provider are set when it starts. Start the server with spark-state's confs -- "
            "start-connect-server.sh $(spark-state server-conf), or the lines of "
            "`spark-state server-conf --properties` in its spark-defaults.conf (Python: "
            "spark_state.server_confs()) -- and create the client session without configure(): "
            "SparkSession.builder.remote(url).getOrCreate(). See docs/spark-connect.md")
    confs = server_confs(backend=backend, options=options, python=python)
    python = confs["spark.pyspark.python"]

    # Builder.config() stores every set conf in _options (pyspark 3.x and 4.x); read it so
    # that jars and plugins the caller added before us are kept, not overwritten.
    for key in ("spark.jars", PLUGINS_CONF, EXTENSIONS_CONF):
        existing = str(getattr(builder, "_options", {}).get(key) or "")
        items = [item.strip() for item in existing.split(",") if item.strip()]
        if confs[key] not in items:
            items.append(confs[key])
        confs[key] = ",".join(items)
    if STOP_ACTIVE_RUN_CONF in getattr(builder, "_options", {}):
        del confs[STOP_ACTIVE_RUN_CONF]
    for key, value in confs.items():
        builder.config(key, value)  # type: ignore[attr-defined]
    # The conf reaches the JVM (which launches executors' Python workers); pyspark's own
    # SparkContext reads only the environment variable (pythonExec) for Python UDF commands.
    os.environ.setdefault("PYSPARK_PYTHON", python)
    return builder


def server_confs(
    *,
    backend: Optional[str] = None,
    options: Optional[Mapping[str, str]] = None,
    python: Optional[str] = None,
) -> dict[str, str]:
    """The Spark confs that run stateful queries on spark-state, as a dict: what
    :func:`configure` sets on a builder, for a driver that is not started from this Python
    process -- a Spark Connect server (``start-connect-server.sh``), ``spark-submit``, a
    cluster's ``spark-defaults.conf``. ``spark-state server-conf`` prints them.

    Keys: ``spark.jars`` (the shim jar, see :mod:`spark_state.spark.jvm`),
    ``spark.sql.streaming.stateStore.providerClass``, ``spark.plugins`` (spark-state's plugin,
    which starts the executors' Python workers with the executors), ``spark.sql.extensions``
    (spark-state's session extensions: keyed functions in the SQL tab), ``spark.pyspark.python`` (``python``,
    default ``sys.executable``: the Python whose workers import spark_state),
    ``spark.sql.streaming.stopActiveRunOnRestart=false`` and one
    ``spark.sql.streaming.stateStore.sparkState.<key>`` per ``backend``/``options`` item
    (validated here, as in :func:`configure`; :class:`~spark_state.errors.ConfigError` on
    unknown keys or bad values).
    """
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    if backend is not None:
        if "backend" in opts and opts["backend"] != backend:
            raise ConfigError(
                f"backend={backend!r} contradicts options['backend']={opts['backend']!r}; "
                "give the backend once"
            )
        opts["backend"] = backend
    ttl_opts, engine_opts = split_ttl_options(opts)
    provider_only, engine_opts = split_provider_options(engine_opts)
    EngineConfig.from_options(engine_opts)  # ConfigError on unknown keys or bad values, storage.* included
    parse_ttl_settings(ttl_opts)  # TTL for built-in operators (``ttl``, ``ttl.*``)
    validate_provider_options(provider_only)  # ``workersPerExecutor``, ``testing.*``

    confs = {
        "spark.jars": jvm.jar_path(),
        PROVIDER_CONF: jvm.PROVIDER_CLASS,
        PLUGINS_CONF: jvm.PLUGIN_CLASS,
        EXTENSIONS_CONF: jvm.EXTENSIONS_CLASS,
        "spark.pyspark.python": python or sys.executable,
        STOP_ACTIVE_RUN_CONF: "false",
    }
    for key, value in opts.items():
        confs[C.CONF_PREFIX + key] = value
    return confs
