"""The command line's tools over a savepoint of any size run in bounded memory, shown by each
command's peak resident memory on a state of 320 MB against one of 4 MB (holding the larger state
would add at least 316 MB):

* ``spark-state read --limit 0`` reads a function's state in its own process, partition store
  after partition store, a chunk of rows at a time, and prints it as it comes, with the output
  and exit status of a whole read (the format itself: tests/unit/test_cli_table.py); it adds the
  tools' RocksDB budget and a chunk of rows (about 110 MB here);
* ``spark-state inspect`` of a savepoint (its metadata rows) reads each state file's schema
  records from the file's end, a record batch at a time.
"""

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


@pytest.fixture(scope="module")
def savepoints(spark, tmp_path_factory):
    """A savepoint of the small state and one of the large state."""
    ship_module_by_value(big_state_fns)
    root = tmp_path_factory.mktemp("savepoints")
    return _savepoint(spark, str(root / "small"), FEW_KEYS), _savepoint(spark, str(root / "large"), KEYS)


def _run(out_path, *argv: str) -> tuple[int, int]:
    """Run ``spark-state ARGV`` (stdout to ``out_path``): its exit status and peak resident
    memory in bytes."""
    with open(out_path, "w") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "spark_state", *argv],
                                stdout=stdout, stderr=subprocess.PIPE, cwd=os.path.dirname(out_path))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == 0, err[-3000:]
    return proc.returncode, usage.ru_maxrss * 1024  # Linux reports kilobytes


def test_read_prints_a_state_of_any_size_in_bounded_memory(savepoints, tmp_path):
    small, large = savepoints
    _, small_peak = _run(tmp_path / "small.txt", "read", small, "blob", "--limit", "0")
    out = tmp_path / "large.txt"
    _, large_peak = _run(out, "read", large, "blob", "--limit", "0")
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


def test_the_metadata_of_a_savepoint_of_any_size_is_read_in_bounded_memory(savepoints, tmp_path):
    small, large = savepoints
    _, small_peak = _run(tmp_path / "small.json", "inspect", small, "--json")
    _, large_peak = _run(tmp_path / "large.json", "inspect", large, "--json")
    assert large_peak - small_peak < GROWTH_BYTES, (small_peak, large_peak)
    rows = json.loads((tmp_path / "large.json").read_text())["metadata"]
    blob = [r for r in rows if r["name"] == "blob"]
    assert len(blob) == 1 and blob[0]["function"] == "Big" and blob[0]["state_type"] == "value"
