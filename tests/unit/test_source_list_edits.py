"""A savepoint's Spark files edited for a changed list of sources (pure): a new function's tick
source inserted, the inverse of dropping one."""

from __future__ import annotations

import json

from spark_state.ops import savepoint_format as F
from spark_state.state_data.writers.keyed_state_surgery import renumbered_source, with_sources, without_source

OFFSETS = b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":5,"conf":{}}\n{"logOffset":3}\n7'


def test_a_new_source_gets_a_line_without_offset_and_the_directories_after_it_move():
    path, data = with_sources(f"{F.SPARK_DIR}/offsets/3", OFFSETS, [1])
    lines = data.decode().split("\n")
    assert path == f"{F.SPARK_DIR}/offsets/3" and lines[2:] == ['{"logOffset":3}', "-", "7"]
    assert json.loads(lines[1])["batchTimestampMs"] == 5
    assert with_sources(f"{F.SPARK_DIR}/sources/0/0", b"log", [1]) == (f"{F.SPARK_DIR}/sources/0/0", b"log")
    assert with_sources(f"{F.SPARK_DIR}/sources/1/x", b"log", [1]) == (f"{F.SPARK_DIR}/sources/2/x", b"log")
    assert with_sources(f"{F.SPARK_DIR}/commits/3", b"c", [0]) == (f"{F.SPARK_DIR}/commits/3", b"c")


def test_inserting_then_dropping_a_source_gives_the_files_back():
    inserted = with_sources(f"{F.SPARK_DIR}/offsets/3", OFFSETS, [0, 3])
    assert inserted[1].decode().split("\n")[2:] == ["-", '{"logOffset":3}', "7", "-"]
    once = without_source(*inserted, 3)
    assert once is not None and without_source(*once, 0) == (f"{F.SPARK_DIR}/offsets/3", OFFSETS)
    assert [renumbered_source(i, [0, 2]) for i in range(3)] == [1, 3, 4]
