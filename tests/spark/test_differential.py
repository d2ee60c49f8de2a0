"""Randomized differential test (``differential``): one generated query per stateful operator,
from a fixed seed, run on Spark's HDFS provider and on spark-state's provider on both backends;
every batch's rows, batch ids included, and every batch's state row counts must be equal.
``bench/differential.py`` runs as many generated queries as asked for, with other seeds."""

from __future__ import annotations

import sys

import differential as D
import pytest
from streaming_harness import SPARKSTATE_BACKENDS, ship_module_by_value

pytestmark = pytest.mark.spark

#: Fixed, so that CI runs the same queries every time; bench/differential.py draws others.
SEED = 20261126

ship_module_by_value(sys.modules[D.__name__])  # applyInPandasWithState's function runs in Python workers


@pytest.mark.parametrize("operator", D.OPERATORS)
def test_generated_query_equals_hdfs_provider(spark, tmp_path, operator):
    spec = D.draw(SEED + D.OPERATORS.index(operator), operators=(operator,))
    outcome = D.compare(spark, spec, SPARKSTATE_BACKENDS, str(tmp_path))
    assert not outcome.differences, spec.describe() + "\n" + "\n".join(outcome.differences[:10])
    assert outcome.rows > 0, f"{spec.describe()}: the reference emitted nothing"
