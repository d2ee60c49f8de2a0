"""Registering spark-state's data sources with a Spark session (the Python Data Source API,
Spark 4.0+). Not automatic: a session that reads or writes state with ``format("spark-state")`` or SQL
calls :func:`register_data_sources` once (registering again is harmless); nothing else needs it.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from ...spark.lines import running_line
from ..errors import StateDataError
from .options import NAME

__all__ = ["register_data_sources"]


def register_data_sources(spark: SparkSession) -> None:
    """Register ``spark-state`` and ``spark-state-metadata`` with ``spark`` (Spark 4.0+: the Python
    Data Source API), so that ``spark.read.format("spark-state")`` and SQL's ``USING `spark-state```
    find them.

    :raises StateDataError: the Spark line has no Python Data Source API (3.5)."""
    line = running_line()
    if getattr(spark, "dataSource", None) is None:
        raise StateDataError(
            f"Spark {line.name} has no Python Data Source API (Spark 4.0+), so format('{NAME}') cannot be "
            "registered: read state with the Python functions (spark_state.state_data.read_keyed_state, read_timers, "
            "read_change_feed, read_function_operator_state), and write a savepoint's state with "
            "spark_state.state_data.SavepointTransform")
    from .sources import SparkStateDataSource, StateMetadataDataSource

    spark.dataSource.register(SparkStateDataSource)
    spark.dataSource.register(StateMetadataDataSource)
