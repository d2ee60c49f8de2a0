"""The state of keyed functions as a Spark data source: ``spark.read.format("spark-state")``.

::

    from spark_state import register_data_sources
    register_data_sources(spark)                      # once per session (Spark 4.0+; :mod:`.register`)
    spark.read.format("spark-state").option("stateVarName", "count").load("/ckpt")
    spark.sql("CREATE TEMPORARY VIEW counts USING `spark-state` OPTIONS (path '/ckpt', stateVarName 'count')")

The options are :class:`~..read_options.ReadOptions`'s, spelled as the data source spells them
(:data:`~..read_options.SPELLINGS`; named like those of Spark's ``statestore`` source where the
concept is the same). What is read: keyed state ``stateVarName`` (Spark's name of a
``transformWithState`` state variable), the timers (``readRegisteredTimers``), the changes of
keyed state (``readChangeFeed``), or a function's operator state (``operatorStateName``). The rows
are those of the Python readers on the same path, options and batch: the source runs their jobs
(:mod:`..partition_jobs`), one input partition per partition store. One difference, as in Spark:
``flattenCollectionTypes`` defaults to true. Storage options (``s3.*``, ``retry.*``, ``hdfs.*``)
pass through to the storage.

The classes live in :mod:`.sources`, which needs ``pyspark.sql.datasource`` (Spark 4.0+),
registered by :mod:`.register`; this module checks the options and plans the read on the driver.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..partition_jobs import PartitionJob
from ..read_options import SOURCE_READ_OPTIONS, SPELLINGS, STORAGE_PREFIXES, ReadOptions
from ..readers.by_options import plan
from ..readers.metadata import state_metadata

__all__ = ["METADATA_NAME", "METADATA_OPTIONS", "NAME", "OPTIONS", "STORAGE_PREFIXES", "metadata_from_options",
           "plan_from_options"]

#: The data sources' short names.
NAME = "spark-state"
METADATA_NAME = "spark-state-metadata"
#: The options of ``format("spark-state")``, as the data source spells them (meanings: the
#: command line's and Python's help, :mod:`spark_state.cli`).
OPTIONS: tuple[str, ...] = tuple(SPELLINGS[n].source for n in SOURCE_READ_OPTIONS)
#: The ReadOptions fields ``format("spark-state-metadata")`` takes (and the storage options).
METADATA_OPTIONS = ("path", "process_root")


def plan_from_options(options: Mapping[str, str]) -> PartitionJob:
    """The read ``options`` ask for, as the Python readers' job (driver side).

    :raises StateDataError: unknown, missing or conflicting options, named as the data source
        spells them."""
    return plan(ReadOptions.from_source(options, NAME))


def metadata_from_options(options: Mapping[str, str]) -> list[dict[str, Any]]:
    """The rows of ``format("spark-state-metadata")`` (:func:`~..readers.metadata.state_metadata`).

    :raises StateDataError: an unknown option, or no path."""
    read = ReadOptions.from_source(options, METADATA_NAME, valid=METADATA_OPTIONS)
    return state_metadata(read.path, storage_options=read.storage_options, process_root=read.process_root)
