"""Spark Connect: telling a Connect client from a classic PySpark driver, and the errors for
what needs a classic one.

With Spark Connect (``SparkSession.builder.remote("sc://host:15002")``) the Spark driver is
the Connect server; the client has no ``SparkContext`` and no Py4J gateway. spark-state's
parts fall in three groups there:

* **Work unchanged** from a Connect client: ``keyed_process``, ``keyed_co_process``,
  ``keyed_broadcast_process`` and ``checkpointed_process`` (they build the query from
  DataFrame operations and ``mapInArrow``, which the server runs), and every query that uses
  the state store provider -- once the *server* runs with the shim jar and the provider conf
  (:func:`spark_state.server_confs`, ``spark-state server-conf``).
* **Work differently**: the event time a DataFrame declares with ``withWatermark`` is read
  from the client's plan instead of the analyzed plan (:mod:`spark_state.process.event_time`).
* **Cannot work**, and say so (:class:`ConnectUnsupportedError`): :func:`spark_state.configure`
  on a builder for an ``sc://`` server (the server started already: its jars and provider
  are set when it starts), and the operations that drive Spark's own providers through the
  driver JVM (``savepoint``/``migrate`` of a checkpoint written by Spark's HDFS or RocksDB
  provider): run those with the ``spark-state`` command, where the checkpoint is reachable.

See ``docs/spark-connect.md``.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ..errors import ConnectUnsupportedError

__all__ = ["ConnectUnsupportedError", "is_connect", "remote_url"]


def is_connect(obj: Any) -> bool:
    """True for a Spark Connect ``SparkSession``, ``DataFrame``, ``Column`` or session builder
    (classes of ``pyspark.sql.connect``); False for classic PySpark objects."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def remote_url(builder: Any) -> Optional[str]:
    """The Spark Connect URL ``builder.getOrCreate()`` would connect to, or None when it would
    start a classic driver in this process.

    ``builder.remote(url)`` (or ``.config("spark.remote", url)``) and the ``SPARK_REMOTE``
    environment variable both select Spark Connect. A ``local...`` URL is not a remote
    server: pyspark starts one in this process with the builder's confs, so ``configure``
    works there; None is returned for it.
    """
    options = getattr(builder, "_options", {}) or {}
    url = options.get("spark.remote") or os.environ.get("SPARK_REMOTE")
    if url is None and is_connect(builder):
        url = "sc://"  # a pyspark.sql.connect builder without a URL yet still connects to a server
    if url is None or str(url).startswith("local"):
        return None
    return str(url)
