"""The provider's Python service with TTL, driven as the JVM shim drives it (load, commit of an
Arrow changes file, maintenance), without Spark: stamping, prior stamps, touches, incremental,
background and full-snapshot cleanup, migrations and the replies the shim reads."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from spark_state.keys import system as syskeys
from spark_state.provider import views
from spark_state.provider.service import StoreService
from spark_state.provider.ttl_commit import OP_TOUCH
from spark_state.ttl import codec
from spark_state.ttl import kv as ttl_kv

PUT, DELETE = 0, 1
UNKNOWN, ABSENT = -1, -2


def key(i: int) -> bytes:
    return bytes([0, i % 100]) + i.to_bytes(4, "big") + b"row"


class Shim:
    """Plays the JVM: one provider instance of a store, with the batch clock (now = version x 1000)."""

    def __init__(self, tmp_path, **ttl_options: str) -> None:
        self.service = StoreService()
        self.tmp = tmp_path
        self.checkpoint = str(tmp_path / "ckpt")
        self.reopen(**ttl_options)

    def reopen(self, **ttl_options: str) -> None:
        """A new provider instance (a query restart) with other TTL options."""
        engine = {"ttl.testing.clock": "batch:1000", "snapshotInterval": "0"}
        engine.update({k.replace("_", "."): v for k, v in ttl_options.items()})
        self.id = uuid.uuid4().hex
        # Spark's provider instances are per (store, query run): a new instance is a new run.
        self.options = json.dumps({"engine": engine, "localDir": str(self.tmp / "local"),
                                   "operatorId": 0, "storeName": "default", "runId": self.id})

    def call(self, reply: str) -> dict:
        parsed = json.loads(reply)
        assert "error" not in parsed, parsed
        return parsed

    def load(self, version: int) -> dict:
        return self.call(self.service.load(self.id, self.checkpoint, self.options, version))

    def commit(self, version: int, rows=(), now: int = -1) -> dict:
        """``rows``: (op, key, value, prior, prior_stamp)."""
        path = str(self.tmp / f"changes-{uuid.uuid4().hex}.arrow")
        rows = list(rows)
        table = pa.table({
            "op": pa.array([r[0] for r in rows], pa.int8()),
            "key": pa.array([r[1] for r in rows], pa.binary()),
            "value": pa.array([r[2] for r in rows], pa.binary()),
            "prior": pa.array([r[3] for r in rows], pa.int8()),
            "prior_stamp": pa.array([r[4] for r in rows], pa.int64()),
        })
        with pa.ipc.new_file(path, table.schema) as writer:
            writer.write_table(table)
        return self.call(self.service.commit(self.id, self.checkpoint, self.options, version, path, now))

    def batch(self, version: int, rows=()) -> dict:
        """A micro-batch: load ``version`` and commit ``rows`` at the time the load gave."""
        loaded = self.load(version)
        return self.commit(version, rows, loaded["ttl"].get("nowMs", -1))

    @property
    def store(self):
        return self.service._instances[self.id].store

    def raw(self, k: bytes):
        return self.store.get(k)

    def system_keys(self) -> list[bytes]:
        return [k for k, _ in self.store.iterate(syskeys.SYSTEM_PREFIX, None)]


def test_commit_stamps_values_with_the_batch_time_and_indexes_them(tmp_path):
    shim = Shim(tmp_path, ttl="5s")
    loaded = shim.load(0)
    assert loaded["ttl"] == {"stamped": False, "enabled": True, "ttlMs": 5000, "nowMs": 0,
                             "returnExpired": False, "refreshOnRead": False}
    shim.commit(0, [(PUT, key(1), b"a", 0, ABSENT), (PUT, key(2), b"b", UNKNOWN, UNKNOWN)], now=0)
    reply = shim.batch(1, [(PUT, key(1), b"a2", 1, 0)])
    assert reply["ttl"]["stamped"] and reply["numKeys"] == 2 and reply["ttl"]["expired"] == 0
    assert shim.raw(key(1)) == codec.stamp(b"a2", 1000) and shim.raw(key(2)) == codec.stamp(b"b", 0)
    # One index entry per row, in the time bucket of its stamp (that of key 1 moved), plus the
    # format marker.
    bucket = lambda stamp: codec.bucket_start(stamp, codec.index_granularity(5000))  # noqa: E731
    assert sorted(shim.system_keys()) == sorted([
        syskeys.index_key(b"", bucket(0), key(2)), syskeys.index_key(b"", bucket(1000), key(1)),
        syskeys.marker_key(b"")])


def test_expired_rows_are_removed_at_commit_and_counted(tmp_path):
    shim = Shim(tmp_path, ttl="2500ms", ttl_cleanupSize="1")
    shim.batch(0, [(PUT, key(i), b"v", 0, ABSENT) for i in range(3)])
    assert shim.batch(1)["ttl"]["expired"] == 0
    assert shim.batch(2)["ttl"]["expired"] == 0
    # At 3000 ms all three (stamped 0) have expired; the incremental sweep takes one per commit.
    assert [shim.batch(v)["ttl"]["expired"] for v in (3, 4, 5)] == [1, 1, 1]
    reply = shim.batch(6)
    assert reply["ttl"]["expired"] == 0 and reply["numKeys"] == 0
    assert shim.system_keys() == [syskeys.marker_key(b"")]


def test_a_touch_refreshes_the_stamp(tmp_path):
    shim = Shim(tmp_path, ttl="2500ms", ttl_updateType="OnReadAndWrite")
    shim.batch(0, [(PUT, key(1), b"x", 0, ABSENT), (PUT, key(2), b"y", 0, ABSENT)])
    assert shim.load(1)["ttl"]["refreshOnRead"]
    shim.batch(1)
    shim.batch(2, [(OP_TOUCH, key(1), b"x", 1, 0)])  # an OnReadAndWrite read of key 1 at 2000 ms
    assert shim.raw(key(1)) == codec.stamp(b"x", 2000)
    reply = shim.batch(3)  # key 2 (0 ms) expired, key 1 (2000 ms) not
    assert reply["ttl"]["expired"] == 1 and reply["numKeys"] == 1 and shim.raw(key(2)) is None


def test_background_cleanup_finds_expired_rows_for_the_next_commit(tmp_path):
    shim = Shim(tmp_path, ttl="1500ms", ttl_cleanupSize="0")
    shim.batch(0, [(PUT, key(i), b"v", 0, ABSENT) for i in range(4)])
    shim.batch(1)
    assert shim.batch(2)["ttl"]["expired"] == 0  # no incremental sweep
    maintenance = shim.call(shim.service.maintenance(shim.id, "cleanup"))
    assert maintenance["ttlExpiredFound"] == 4
    # A retry of the last batch commits on top of version 2, not 3: the candidates found in
    # version 3 are discarded.
    assert shim.batch(2)["ttl"]["expired"] == 0
    shim.call(shim.service.maintenance(shim.id, "cleanup"))
    reply = shim.batch(3, [(PUT, key(0), b"new", 1, 0)])  # key 0 written again: not removed
    assert reply["ttl"]["expired"] == 3 and reply["numKeys"] == 1


def test_background_cleanup_can_be_turned_off(tmp_path):
    shim = Shim(tmp_path, ttl="1s", ttl_cleanupSize="0", ttl_backgroundCleanup="false")
    shim.batch(0, [(PUT, key(1), b"v", 0, ABSENT)])
    shim.batch(1)
    assert shim.call(shim.service.maintenance(shim.id, "cleanup")).get("ttlExpiredFound", 0) == 0
    assert shim.batch(2)["ttl"]["expired"] == 0 and shim.batch(3)["numKeys"] == 1


def test_full_snapshot_cleanup_removes_every_expired_row_before_a_snapshot(tmp_path):
    shim = Shim(tmp_path, ttl="700ms", ttl_cleanupSize="1", ttl_fullSnapshotCleanup="true",
                ttl_backgroundCleanup="false", snapshotInterval="3")
    shim.batch(0, [(PUT, key(i), b"v", 0, ABSENT) for i in range(5)])
    assert shim.batch(1)["ttl"]["expired"] == 1  # incremental: one per commit
    reply = shim.batch(2)  # version 3: this commit snapshots, so everything expired goes first
    assert reply["commit"]["snapshot_taken"] and reply["ttl"]["expired"] == 4 and reply["numKeys"] == 0


@pytest.mark.parametrize("chunk", [1, 2, 3, ttl_kv.CHUNK_ROWS])
def test_full_snapshot_cleanup_in_chunks_removes_what_one_pass_removes(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(ttl_kv, "CHUNK_ROWS", chunk)
    # The batch clock: a batch that loads version v runs at v * 1000 ms.
    shim = Shim(tmp_path, ttl="1h", ttl_cleanupSize="0", ttl_backgroundCleanup="false",
                ttl_fullSnapshotCleanup="true", snapshotInterval="4")
    shim.batch(0)
    shim.batch(1, [(PUT, key(i), b"v%d" % i, 0, ABSENT) for i in range(12)])   # stamped 1000, bucket 0 of 225 s
    shim.reopen(ttl="700ms", ttl_cleanupSize="0", ttl_backgroundCleanup="false",
                ttl_fullSnapshotCleanup="true", snapshotInterval="4")            # buckets of 43 ms
    # Rewrites at 2000 look for the old entry in bucket 989 (43 ms wide): the one in bucket 0 stays, stale.
    reply = shim.batch(2, [(PUT, key(i), b"w%d" % i, 1, 1000) for i in (0, 1)])
    assert not reply["commit"]["snapshot_taken"] and reply["ttl"]["expired"] == 0
    # Version 4 snapshots: everything expired at 3000 goes. k0 and k1 (stamped 2000) have a stale
    # entry in bucket 0 and the real one in bucket 1978: in different chunks when chunks are small.
    reply = shim.batch(3, [(PUT, key(2), b"x2", 1, 1000),      # rewritten in this epoch: survives
                           (DELETE, key(3), None, 1, 1000),    # deleted by the epoch: not an expiry
                           (PUT, key(20), b"new", 0, ABSENT)])
    assert reply["commit"]["snapshot_taken"]
    assert reply["ttl"]["expired"] == 10                       # k0, k1, k4..k11: each once
    assert reply["numKeys"] == 2 and shim.store.num_keys() == 2
    data = {k: codec.unstamp(v) for k, v in shim.store.iterate(None, syskeys.SYSTEM_PREFIX)}
    assert data == {key(2): (3000, b"x2"), key(20): (3000, b"new")}
    # No stale entry is left: the index holds the two live rows, in the bucket of 3000.
    index = [syskeys.decode_index_key(b"", k) for k in shim.system_keys() if k != syskeys.marker_key(b"")]
    assert index == [(2967, key(2)), (2967, key(20))]


def test_turning_ttl_on_stamps_existing_rows_and_off_strips_them(tmp_path):
    shim = Shim(tmp_path)  # no TTL
    shim.batch(0, [(PUT, key(i), b"v%d" % i, 0, ABSENT) for i in range(3)])
    assert shim.raw(key(1)) == b"v1" and shim.system_keys() == []
    assert shim.load(1)["ttl"] == {"stamped": False, "enabled": False}

    shim.reopen(ttl="10s")
    assert shim.load(1)["ttl"]["stamped"] is False  # the JVM reads version 1 unstamped
    reply = shim.batch(1, [(PUT, key(1), b"w1", 1, UNKNOWN)])
    assert reply["ttl"]["migrated"] == 3 and reply["ttl"]["stamped"] and reply["numKeys"] == 3
    assert shim.raw(key(0)) == codec.stamp(b"v0", 1000) and shim.raw(key(1)) == codec.stamp(b"w1", 1000)
    assert len(shim.system_keys()) == 4  # three index entries and the marker

    shim.reopen()  # TTL off again
    loaded = shim.load(2)
    assert loaded["ttl"] == {"stamped": True, "enabled": False}  # the JVM strips, never expires
    reply = shim.commit(2, [(DELETE, key(2), None, 1, 1000)])
    assert reply["ttl"]["migrated"] == 3 and not reply["ttl"]["stamped"] and reply["numKeys"] == 2
    assert shim.raw(key(0)) == b"v0" and shim.raw(key(1)) == b"w1" and shim.system_keys() == []


def test_restart_with_another_ttl_needs_no_migration(tmp_path):
    shim = Shim(tmp_path, ttl="1h")
    shim.batch(0, [(PUT, key(1), b"v", 0, ABSENT)])
    shim.reopen(ttl="500ms")  # another TTL, hence another index bucket width: still swept
    reply = shim.batch(1)
    assert reply["ttl"]["migrated"] == 0 and reply["ttl"]["expired"] == 1


@pytest.mark.parametrize("expired", [5, 16, 17], ids=["3-batches", "at-the-bound", "past-the-bound"])
def test_expired_keys_reach_the_jvm_in_record_batches_up_to_a_bound(tmp_path, expired):
    """The keys a commit's expiry deleted go to the JVM in a file of record batches of
    ``testing.expiredKeysBatchRows`` keys, at most EXPIRED_BATCHES_APPLIED (8) of them: past
    that the commit tells the JVM to reload the version, and no file is left behind."""
    assert views.EXPIRED_BATCHES_APPLIED == 8
    shim = Shim(tmp_path, ttl="700ms", ttl_backgroundCleanup="false", testing_expiredKeysBatchRows="2")
    shim.batch(0, [(PUT, key(i), b"v", 0, ABSENT) for i in range(expired)])
    reply = shim.batch(1, [(PUT, key(50), b"live", 0, ABSENT)])   # at 1000 ms all of them expired
    assert reply["ttl"]["expired"] == expired and reply["numKeys"] == 1
    files = list((tmp_path / "local").rglob("expired-*"))
    if expired > 16:
        assert reply["view"] == {"apply": "reload"} and files == []
        return
    path = reply["view"]["expiredPath"]
    assert reply["view"] == {"apply": "stamped", "stampMs": 1000, "expiredPath": path} and files == [Path(path)]
    with pa.OSFile(path, "rb") as source:
        reader = pa.ipc.open_file(source)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    assert [b.num_rows for b in batches] == [2] * (expired // 2) + [1] * (expired % 2)
    assert sorted(k for b in batches for k in b.column("key").to_pylist()) == sorted(key(i) for i in range(expired))


def test_a_failed_commit_leaves_no_expired_keys_file(tmp_path):
    sink = views.ViewExporter("rocksdb", str(tmp_path / "views"), expired_batch_rows=2).expired_keys()
    with pytest.raises(RuntimeError, match="commit failed"):
        with sink:
            for key in (b"a", b"b", b"c"):  # one batch written
                sink.append(key)
            assert Path(sink.path).exists()
            raise RuntimeError("commit failed")
    assert not Path(sink.path).exists()
