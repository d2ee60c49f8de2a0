"""``check_upgrade``: will a changed query restart on this checkpoint, and if not, what carries
its state over. The one entry point of the Python API and of ``spark-state upgrade-check``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Mapping, Optional

from pyspark.sql import SparkSession

from ..errors import SparkStateError
from .held import read_held_state
from .spark_plan import QueryBuilder, plan_new_query
from .verdicts import UpgradeReport, judge

__all__ = ["OUTPUT_MODES", "QueryLoadError", "check_upgrade", "load_query_builder"]

OUTPUT_MODES = ("append", "update", "complete")


class QueryLoadError(SparkStateError):
    """``--query`` names no function that can be loaded."""


def check_upgrade(spark: SparkSession, checkpoint: str, query: QueryBuilder, *, output_mode: str = "append",
                  storage_options: Optional[Mapping[str, str]] = None) -> UpgradeReport:
    """Compare the stateful operators of the new query with what ``checkpoint`` holds, without
    running the query.

    Args:
        spark: a session of the application (the check plans in a new session of it, with the
            checkpoint's confs, as a restart does).
        checkpoint: the query's ``checkpointLocation``.
        query: a function that builds the new query's streaming DataFrame from a SparkSession
            (everything before ``writeStream``); it must use the session it is given.
        output_mode: the output mode the new query is started with.
        storage_options: checkpoint storage options (``s3.*``), if remote.

    Returns: one verdict per operator id and the error Spark raises at start (if any); its
    ``exit_status`` is 0 only when the query may restart as it is.
    """
    if output_mode not in OUTPUT_MODES:
        raise ValueError(f"output_mode must be one of {', '.join(OUTPUT_MODES)}, got {output_mode!r}")
    held = read_held_state(checkpoint, storage_options)
    return judge(held, plan_new_query(spark, query, held, output_mode))


def load_query_builder(spec: str) -> QueryBuilder:
    """The function ``spec`` names: ``package.module:function`` (importable) or
    ``path/to/file.py:function``.

    :raises QueryLoadError: naming what is missing."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise QueryLoadError(f"--query takes MODULE:FUNCTION or FILE.py:FUNCTION, got {spec!r}")
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise QueryLoadError(f"--query: no file {target}")
        module_name = f"_spark_state_query_{abs(hash(os.path.abspath(target)))}"
        spec_obj = importlib.util.spec_from_file_location(module_name, target)
        assert spec_obj is not None and spec_obj.loader is not None
        module = importlib.util.module_from_spec(spec_obj)
        sys.modules[module_name] = module
        spec_obj.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise QueryLoadError(f"--query: cannot import {target} ({exc})") from None
    builder = getattr(module, name, None)
    if not callable(builder):
        raise QueryLoadError(f"--query: {target} has no function {name}")
    return builder
