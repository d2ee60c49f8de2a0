"""RocksDB's compaction threads run at the nice value ``rocksdb.compactionNice`` asks for
(``spark_state.backends.rocksdb_threads``), flushes keep theirs, and the option is validated.

Thread priorities belong to the process (RocksDB's pools are process-wide), so each case runs in
a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spark_state import EngineConfig
from spark_state.errors import ConfigError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")

# Opens one store per nice value given, commits and snapshots it (a flush), and prints the nice
# values of the process's RocksDB threads by pool after each.
_CHILD = """
import json, os, sys, tempfile
from spark_state import EngineConfig, VersionedStore

def nices(prefix):
    out = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            if f.read().startswith(prefix):
                out.append(os.getpriority(os.PRIO_PROCESS, int(tid)))
    return sorted(out)

root = tempfile.mkdtemp()
for i, nice in enumerate(json.loads(sys.argv[1])):
    cfg = EngineConfig.from_options({"rocksdb.compactionNice": str(nice), "localDir": f"{root}/local"})
    store = VersionedStore(f"{root}/ckpt{i}", cfg)
    store.load(0)
    store.put_many([b"k%05d" % n for n in range(2000)], [b"v" * 50] * 2000)
    store.commit()
    store.snapshot()
    print(json.dumps({"low": nices("rocksdb:low"), "high": nices("rocksdb:high")}), flush=True)
    store.close()
"""


def _nices_after_stores(*nices: int) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(list(nices))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_compaction_threads_get_the_lowest_priority_by_default_and_flushes_keep_theirs():
    (after,) = _nices_after_stores(19)
    assert EngineConfig().compaction_nice == 19
    assert after["low"] and set(after["low"]) == {19}, after
    assert after["high"] and set(after["high"]) == {0}, after


def test_zero_leaves_the_threads_as_they_are():
    (after,) = _nices_after_stores(0)
    assert after["low"] and set(after["low"]) == {0}, after


def test_the_lowest_priority_asked_for_wins_and_is_never_raised_again():
    first, second, third = _nices_after_stores(5, 12, 3)
    assert set(first["low"]) == {5} and set(second["low"]) == {12}, (first, second)
    assert set(third["low"]) == {12}, third  # a later store asking for 3 does not raise it


@pytest.mark.parametrize("value, message", [
    ("20", "must be a nice value from 0 to 19"),
    ("-1", "'rocksdb.compactionNice' must be >= 0"),
    ("low", "must be an integer"),
])
def test_a_bad_value_is_rejected_by_name(value, message):
    with pytest.raises(ConfigError, match=message):
        EngineConfig.from_options({"rocksdb.compactionNice": value})
