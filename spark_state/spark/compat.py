"""The pyspark Python APIs spark-state calls whose form differs between the supported Spark lines
(:mod:`spark_state.spark.lines`), in one place. Everything else spark-state calls is the same on
every line.

=====================  ===========================================  ==========================
call                   3.5 / 4.0 / 4.1                              4.2 and newer
=====================  ===========================================  ==========================
``to_arrow_schema``    ``(schema)``: timestamps are UTC already     ``(schema, timezone=...)``
``StructType.fromDDL`` 4.0+; 3.5 parses with the JVM's DDL parser   ``StructType.fromDDL``
``RuntimeConfig``      4.0+: ``getAll``; 3.5: names from ``SET``     ``getAll``
=====================  ===========================================  ==========================
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

__all__ = ["arrow_schema", "parse_ddl", "session_confs"]


@lru_cache(maxsize=None)
def _to_arrow_takes_timezone() -> bool:
    from pyspark.sql.pandas.types import to_arrow_schema

    return "timezone" in inspect.signature(to_arrow_schema).parameters


def arrow_schema(schema: "StructType") -> "pa.Schema":
    """The Arrow schema of a Spark schema, timestamps as ``timestamp[us, tz=UTC]`` (how Spark's
    Arrow batches carry them to ``mapInArrow``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if _to_arrow_takes_timezone():
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)  # 3.5-4.1: UTC is the only (3.5) or default form


def parse_ddl(ddl: str) -> "DataType":
    """A DDL schema string (``'word string, n bigint'``) as a Spark type."""
    from pyspark.sql.types import StructType

    from_ddl: Any = getattr(StructType, "fromDDL", None)
    if from_ddl is not None:
        return from_ddl(ddl)
    # Spark 3.5: the parser pyspark itself uses for DDL strings (needs an active SparkContext).
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl)


def session_confs(spark: Any, prefix: str) -> dict[str, str]:
    """The session's confs (classic or Spark Connect) whose names start with ``prefix``."""
    conf = spark.conf
    if hasattr(type(conf), "getAll"):  # 4.0+: a property, on classic and Connect sessions
        return {k: v for k, v in conf.getAll.items() if k.startswith(prefix)}
    # Spark 3.5 has no getAll: the names come from the SET command's listing, the values from
    # conf.get, since SET shows secrets (storage.s3.secret_access_key) redacted.
    names = [row[0] for row in spark.sql("SET").collect() if str(row[0]).startswith(prefix)]
    return {name: conf.get(name) for name in names}
