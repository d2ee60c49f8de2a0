"""The keyed function of tests/state_data/test_read_memory.py (shipped to the Python workers by
value): one large string value per key, so that a state of few rows is large."""

from __future__ import annotations

from pyspark.sql.types import StringType

from spark_state.process import KeyedProcessFunction
from spark_state.state import ValueStateDescriptor

#: Characters of each key's value.
VALUE_CHARS = 4096


class LargeValues(KeyedProcessFunction):
    """Per key: ``blob``, the key repeated to :data:`VALUE_CHARS` characters."""

    def open(self, ctx):
        self.blob = ctx.get_state(ValueStateDescriptor("blob", StringType()))

    def process_element(self, row, ctx):
        self.blob.update((row.k * VALUE_CHARS)[:VALUE_CHARS])
        return ()
