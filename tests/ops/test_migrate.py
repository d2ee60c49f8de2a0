"""Migrate on real queries: a checkpoint of Spark's HDFS or RocksDB provider becomes a
spark-state checkpoint, and a spark-state checkpoint one of the HDFS or RocksDB provider;
the unchanged query restarted on it (whatever provider the session names) continues with
output equal to an uninterrupted run on the original provider. The source is untouched."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

import test_operator_equivalence as E
from ops_support import assert_equal_to_uninterrupted, reference, run
from spark_state import ops
from spark_state.ops.errors import UnsupportedCheckpointError
from spark_state.spark.lines import get_line, running_line
from streaming_harness import HDFS_PROVIDER, ROCKSDB_PROVIDER, SPARKSTATE_PROVIDER

pytestmark = pytest.mark.spark

SHORT = {HDFS_PROVIDER: "hdfs", ROCKSDB_PROVIDER: "rocksdb", SPARKSTATE_PROVIDER: "spark-state"}
PAIRS = [(HDFS_PROVIDER, "spark-state"), (ROCKSDB_PROVIDER, "spark-state"), (SPARKSTATE_PROVIDER, "hdfs"),
         (SPARKSTATE_PROVIDER, "rocksdb")]


def _digest(root) -> str:
    h = hashlib.sha256()
    for dirpath, _, names in sorted(os.walk(root)):
        for n in sorted(names):
            p = os.path.join(dirpath, n)
            h.update(p.encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


#: Every direction on an aggregation; a join (four stores) and a session window (prefix-scan
#: keys) on import, whose rows the JVM must give spark-state's key layout.
COMBOS = [("agg_update", s, t) for s, t in PAIRS] + [
    ("join_left_outer", HDFS_PROVIDER, "spark-state"), ("session_window", ROCKSDB_PROVIDER, "spark-state")]


@pytest.mark.parametrize("name,source,to", COMBOS, ids=[f"{n}-{SHORT[s]}-to-{t}" for n, s, t in COMBOS])
def test_migrate_then_continue_equals_an_uninterrupted_run(spark, name, source, to, tmp_path, tmp_path_factory):
    case = E.CASES_BY_NAME[name]
    want = reference(spark, case, tmp_path_factory, provider=source, cuts=(3,))

    dirs = E.write_inputs(case, tmp_path, upto=3)
    src = tmp_path / "src"
    first = run(spark, case, src, dirs, provider=source, partitions=3)
    before = _digest(src)
    result = ops.migrate(str(src), str(tmp_path / "dst"), to=to, progress=False)
    assert _digest(src) == before, "the source checkpoint was modified"
    assert result.from_provider == SHORT[source] and result.to_provider == to
    with open(tmp_path / "dst" / "offsets" / str(result.batch_id)) as f:
        conf = json.loads(f.read().split("\n")[1])["conf"]
    assert conf["spark.sql.streaming.stateStore.providerClass"] == {v: k for k, v in SHORT.items()}[to]

    E.write_inputs(case, tmp_path, start=3)
    # the session names the *old* provider: the checkpoint's class must win
    second = run(spark, case, tmp_path / "dst", dirs, provider=source)
    assert min(second.batch_ids) == result.batch_id + 1
    assert_equal_to_uninterrupted(case, [first, second], want, f"{name} migrated {SHORT[source]} -> {to}")
    info = ops.inspect(str(tmp_path / "dst"))
    assert info["provider"] == to
    if to == "spark-state":  # the migrated state holds the rows the source had at its batch
        assert all(op["rows"] > 0 for op in info["operators"])


def test_savepoint_of_a_spark_provider_checkpoint_restores_as_spark_state(spark, tmp_path, tmp_path_factory):
    """A savepoint reads Spark's RocksDB provider's stores through the provider itself; its
    restore at another partition count is a spark-state checkpoint that continues exactly."""
    case = E.CASES_BY_NAME["dedup"]
    want = reference(spark, case, tmp_path_factory, provider=ROCKSDB_PROVIDER, cuts=(3,))
    dirs = E.write_inputs(case, tmp_path, upto=3)
    first = run(spark, case, tmp_path / "src", dirs, provider=ROCKSDB_PROVIDER, partitions=3)
    sp = ops.savepoint(str(tmp_path / "src"), str(tmp_path / "sp"), progress=False)
    assert sp.keys == len({i for b in case.batches[0][:3] for i, _ in b})
    ops.restore(sp.savepoint, str(tmp_path / "dst"), partitions=4, progress=False)
    info = ops.inspect(str(tmp_path / "dst"))
    assert info["provider"] == "spark-state" and info["partitions"] == 4 and info["operators"][0]["rows"] == sp.keys
    E.write_inputs(case, tmp_path, start=3)
    second = run(spark, case, tmp_path / "dst", dirs, provider=ROCKSDB_PROVIDER)
    assert_equal_to_uninterrupted(case, [first, second], want, "RocksDB savepoint restored on spark-state")


@pytest.mark.lines
def test_migrating_to_sparks_rocksdb_provider_on_each_line(spark, tmp_path, tmp_path_factory):
    """Spark's RocksDB provider writes a store version from an empty store only from Spark 4.2 on
    (``loadEmpty``): there a migration into it continues exactly; before, it is refused at once,
    naming the line, and nothing is written."""
    case = E.CASES_BY_NAME["agg_update"]
    dirs = E.write_inputs(case, tmp_path, upto=3)
    first = run(spark, case, tmp_path / "src", dirs, provider=HDFS_PROVIDER, partitions=3)
    if running_line() < get_line("4.2"):
        with pytest.raises(UnsupportedCheckpointError, match=f"needs Spark 4.2 or newer .*Spark {running_line().name}"):
            ops.migrate(str(tmp_path / "src"), str(tmp_path / "dst"), to="rocksdb", progress=False)
        assert not (tmp_path / "dst").exists()
        return
    ops.migrate(str(tmp_path / "src"), str(tmp_path / "dst"), to="rocksdb", progress=False)
    E.write_inputs(case, tmp_path, start=3)
    second = run(spark, case, tmp_path / "dst", dirs, provider=HDFS_PROVIDER)
    want = reference(spark, case, tmp_path_factory, cuts=(3,))
    assert_equal_to_uninterrupted(case, [first, second], want, "agg_update migrated HDFS -> rocksdb")
