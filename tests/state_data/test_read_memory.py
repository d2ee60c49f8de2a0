"""``spark-state read --limit 0`` prints a state of any size in bounded memory: a function's state
is read in the command's process partition store after partition store, a chunk of rows at a
time, and printed as it comes, with the output and exit status of a whole read (the format
itself: tests/unit/test_cli_table.py). Shown by the command's peak resident memory on a state of
320 MB against one of 4 MB: holding the larger state would add at least 316 MB; reading it adds
the tools' RocksDB budget and a chunk of rows (about 110 MB here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import big_state_fns
from big_state_fns import VALUE_CHARS, LargeValues
from spark_state.state_data import SavepointWriter
from streaming_harness import ship_module_by_value

pytestmark = pytest.mark.spark

#: Keys of the large state: 80,000 values of 4 KB (320 MB), and of the small one (4 MB).
KEYS, FEW_KEYS = 80_000, 1_000
PARALLELISM = 8
#: What the larger state may add to the command's peak memory: a chunk of rows in flight and
#: the tools' RocksDB budget (constants.TOOL_BLOCK_CACHE_MB), half the 316 MB the larger
#: state holds more.
GROWTH_BYTES = 160 << 20


def _savepoint(spark, path: str, keys: int) -> str:
    history = spark.range(keys).selectExpr("cast(id as string) as k")
    (SavepointWriter(spark, progress=False)
     .with_keyed_state("Big", history, "k", LargeValues(), parallelism=PARALLELISM).write(path, sources=1))
    return path


def _read(savepoint: str, out_path) -> tuple[int, int]:
    """Run ``spark-state read SAVEPOINT blob --limit 0`` (stdout to ``out_path``): its exit status
    and peak resident memory in bytes."""
    with open(out_path, "w") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "spark_state", "read", savepoint, "blob", "--limit", "0"],
                                stdout=stdout, stderr=subprocess.PIPE, cwd=os.path.dirname(out_path))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == 0, err[-3000:]
    return proc.returncode, usage.ru_maxrss * 1024  # Linux reports kilobytes


def test_read_prints_a_state_of_any_size_in_bounded_memory(spark, tmp_path):
    ship_module_by_value(big_state_fns)
    small = _savepoint(spark, str(tmp_path / "small"), FEW_KEYS)
    large = _savepoint(spark, str(tmp_path / "large"), KEYS)
    _, small_peak = _read(small, tmp_path / "small.txt")
    out = tmp_path / "large.txt"
    _, large_peak = _read(large, out)
    assert large_peak - small_peak < GROWTH_BYTES, (small_peak, large_peak)
    keys = set()
    with open(out) as printed:  # line by line: the test holds no more of the state than the command
        assert next(printed) == "k\tvalue\tpartition_id\n"
        for line in printed:
            if line.startswith("("):
                assert line == f"({KEYS} rows)\n" and next(printed, None) is None
                break
            key, value, _ = (json.loads(column) for column in line.split("\t"))
            assert value == (key * VALUE_CHARS)[:VALUE_CHARS]
            keys.add(int(key))
    assert keys == set(range(KEYS))
