"""A SparkSession for a benchmark run: a contender's provider, at a given driver heap.

Every measured run is ``local[2]`` by default (the 2-core machine the figures come from) with
the UI off (it costs a thread per listener and memory for every batch). The heap is the driver's
(``spark.driver.memory``): in local mode the executor is the driver, so that is the heap the
state of Spark's HDFS provider and of our ``hashmap`` backend lives in. It only takes effect in
a new JVM, which is why every run has a process of its own (:mod:`.workers`).

:func:`parse_heaps` reads ``--heaps 1g,4g``: Spark's default driver memory (1 GB) is what most
users run with and where the in-heap providers run out; a larger heap shows what the same code
does when memory is not what binds it.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional

from .contenders import PROVIDER_CONF, Contender

#: Spark's default driver memory, and the larger heap the benchmarks also run at.
DEFAULT_HEAPS = ("1g", "4g")


def parse_heaps(text: str) -> list[str]:
    """``"1g,4g"`` -> ``["1g", "4g"]``; a heap is a JVM size (``512m``, ``1g``, ``4g``)."""
    heaps = [h.strip().lower() for h in text.split(",") if h.strip()]
    for h in heaps:
        if not (h[:-1].isdigit() and h[-1] in "kmg"):
            raise ValueError(f"a heap is a number and k, m or g (1g, 4g, 512m), not {h!r}")
    if not heaps:
        raise ValueError("no heap given")
    return heaps


def add_heaps_option(parser) -> None:
    """The ``--heaps`` option of a benchmark that runs at several driver heaps."""
    parser.add_argument("--heaps", default=",".join(DEFAULT_HEAPS),
                        help="driver heaps to run everything at (comma list; default: Spark's 1g, and 4g)")


def use_this_python() -> None:
    """Make PySpark's workers (and the driver a session starts) run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def builder(
    app: str,
    *,
    contender: Optional[Contender] = None,
    spark_state: bool = False,
    configure_options: Optional[Mapping[str, str]] = None,
    master: str = "local[2]",
    partitions: Optional[int] = 4,
    driver_memory: Optional[str] = None,
    local_dir: Optional[str] = None,
    confs: Optional[Mapping[str, str]] = None,
):
    """A ``SparkSession.Builder`` for one run.

    ``spark_state.configure`` goes on it when ``spark_state`` is set or the contender is ours
    (with ``configure_options``); then the contender's provider class and confs; ``confs`` last,
    so that a benchmark's ``--conf KEY=VALUE`` wins over everything.
    """
    use_this_python()
    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master(master).appName(app)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
    if partitions is not None:
        b = b.config("spark.sql.shuffle.partitions", str(partitions))
    if driver_memory:
        b = b.config("spark.driver.memory", driver_memory)
    if local_dir:
        b = b.config("spark.local.dir", local_dir)
    if spark_state or (contender is not None and contender.ours):
        from spark_state import configure

        b = configure(b, options=configure_options) or b
    if contender is not None:
        b = b.config(PROVIDER_CONF, contender.provider_class)
        for key, value in contender.confs.items():
            b = b.config(key, value)
    for key, value in (confs or {}).items():
        b = b.config(key, value)
    return b


def start(b, log_level: str = "ERROR"):
    """The session of a builder, with Spark's log at ``log_level`` (runs log to a file)."""
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def stop_quietly(spark) -> None:
    """Stop a session whose JVM may be going away already (after an OutOfMemoryError, a cap)."""
    try:
        spark.stop()
    except Exception:
        pass


def add_conf_option(parser) -> None:
    """The repeatable ``--conf KEY=VALUE`` option (a Spark conf for every run); ``dict(args.conf)``."""
    parser.add_argument("--conf", action="append", default=[], type=_conf_item, metavar="KEY=VALUE",
                        help="extra Spark conf for every run")


def _conf_item(item: str) -> tuple[str, str]:
    import argparse

    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--conf takes KEY=VALUE, got {item!r}")
    return key.strip(), value.strip()
