"""Where a provider commit's time goes: the Python worker's service driven directly, without Spark.

Drives :class:`spark_state.provider.service.StoreService` the way the JVM shim does (``load``,
then ``commit`` of an Arrow changes file per epoch, same schema as ``ChangeBuffer.writeArrow``)
and times the phases of each commit by wrapping the functions that do the work:

* ``read_changes``       -- reading the JVM's Arrow file
* ``stage``              -- staging the epoch (TTL stamping when on; without TTL the epoch's
                            Arrow columns are committed whole)
* ``changelog encode``   -- the epoch's changelog, as Arrow IPC (spooled to local disk when large)
* ``changelog+manifest`` -- durable writes to checkpoint storage (``write_bytes``)
* ``apply``              -- the RocksDB WriteBatch of the epoch
* ``count``              -- lookups for the exact key count (keys whose existence is unknown)
* ``snapshot``           -- capturing (and, when synchronous, uploading) a snapshot
* ``view export``        -- a RocksDB checkpoint for the JVM's read view (flush + hard links)

The JVM side (opening a read-only RocksDB per exported view) is not in this process; the
shim's own ``sparkStateLoadTimeMs`` metric covers it in Spark runs.

Usage: python bench/commit_profile.py [--keys 250000] [--updates 50000] [--epochs 20]
           [--snapshot-interval 10] [--s3-endpoint http://127.0.0.1:PORT] [--backend rocksdb|hashmap]
Prints per-phase totals and p50/p99 of the whole commit call. Numbers taken while the
machine is busy are not comparable with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import numpy as np
import pyarrow as pa

from harness import moto, results
from harness.phases import PhaseTimes
from harness.stats import percentile

SCHEMA = pa.schema([("op", pa.int8()), ("key", pa.binary()), ("value", pa.binary()),
                    ("prior", pa.int8()), ("prior_stamp", pa.int64())])

PHASES = PhaseTimes()
TIMES = PHASES.seconds
_wrap = PHASES.wrap


def instrument() -> None:
    from spark_state.engine import store as store_mod
    from spark_state.backends import rocksdb as rocks
    from spark_state.engine.epoch_writes import ArrowWrites, OverlayWrites
    from spark_state.provider import service, ttl_commit
    from spark_state.storage import local

    _wrap(service, "read_changes_table", "read_changes")
    _wrap(ttl_commit, "stage_epoch", "stage")
    _wrap(rocks.RocksDBBackend, "apply", "apply")
    _wrap(rocks.RocksDBBackend, "apply_distinct", "apply")
    for writes in (OverlayWrites, ArrowWrites):
        _wrap(writes, "existing_user_keys", "count")
        _wrap(writes, "write_changelog", "changelog encode")
    from spark_state.storage import remote
    for cls in (local.LocalStorage, remote.FsspecStorage):
        _wrap(cls, "write_bytes", "changelog+manifest")
    if hasattr(store_mod.VersionedStore, "_upload_snapshot"):
        _wrap(store_mod.VersionedStore, "_upload_snapshot", "snapshot")
    if hasattr(store_mod.VersionedStore, "_capture_snapshot"):
        _wrap(store_mod.VersionedStore, "_capture_snapshot", "snapshot")
    if hasattr(store_mod.VersionedStore, "export_view"):
        _wrap(store_mod.VersionedStore, "export_view", "view export")


def changes_file(path: str, keys: np.ndarray, values_len: int, rng, prior: int = -1) -> None:
    """A changes file of puts of ``keys``; ``prior`` as the JVM reports it (1: read, existed; -1: unknown)."""
    def key_bytes(k: int) -> bytes:
        return (int(k % 32768).to_bytes(2, "big") + int(k).to_bytes(4, "big", signed=False)
                + int(k).to_bytes(16, "little"))

    n = len(keys)
    table = pa.table({
        "op": pa.array(np.zeros(n, dtype=np.int8)),
        # sorted, as the shim writes them (ChangeBuffer orders an epoch's keys at commit)
        "key": pa.array(sorted(key_bytes(int(k)) for k in keys), pa.binary()),
        "value": pa.array([rng.bytes(values_len) for _ in range(n)], pa.binary()),
        "prior": pa.array(np.full(n, prior, dtype=np.int8)),
        "prior_stamp": pa.array(np.full(n, -1, dtype=np.int64)),
    }, schema=SCHEMA)
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_table(table)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=250_000, help="key space of the store")
    parser.add_argument("--updates", type=int, default=50_000, help="keys written per epoch")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--snapshot-interval", type=int, default=10)
    parser.add_argument("--backend", default="rocksdb")
    parser.add_argument("--s3-endpoint", help="checkpoint on this S3 endpoint (moto) instead of local disk")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    instrument()
    from spark_state.provider.service import StoreService

    work = tempfile.mkdtemp(prefix="commit-profile-")
    options = {"engine": {"snapshotInterval": str(args.snapshot_interval), "backend": args.backend},
               "localDir": os.path.join(work, "local"), "runId": str(uuid.uuid4()),
               "operatorId": 0, "storeName": "default"}
    if args.s3_endpoint:
        bucket = moto.create_bucket(args.s3_endpoint, "profile")
        checkpoint = f"s3://{bucket}/state/0/0"
        options["storage"] = moto.storage_options(args.s3_endpoint)
    else:
        checkpoint = os.path.join(work, "ckpt")
    service = StoreService()
    rng = np.random.default_rng(7)
    commit_ms: list[float] = []
    per_epoch: list[dict] = []
    try:
        opts = json.dumps(options)
        version = 0
        reply = json.loads(_load(service, opts, checkpoint, version))
        assert "error" not in reply, reply
        # Fill the store with the whole key space first (not measured).
        for chunk in np.array_split(np.arange(args.keys), max(1, args.keys // 200_000)):
            path = os.path.join(work, "fill.arrow")
            changes_file(path, chunk, 16, rng)
            reply = json.loads(service.commit("i", checkpoint, opts, version, path, -1))
            assert "error" not in reply, reply
            version += 1
            _load(service, opts, checkpoint, version)
        TIMES.clear()
        for _ in range(args.epochs):
            path = os.path.join(work, f"epoch-{version}.arrow")
            changes_file(path, rng.choice(args.keys, size=args.updates, replace=False), 16, rng, prior=1)
            before = dict(TIMES)
            started = time.perf_counter()
            reply = json.loads(service.commit("i", checkpoint, opts, version, path, -1))
            elapsed = (time.perf_counter() - started) * 1000
            assert "error" not in reply, reply
            os.unlink(path)
            version += 1
            _load(service, opts, checkpoint, version)  # the next task's load (exports a view if the design needs one)
            commit_ms.append(elapsed)
            per_epoch.append({k: round((TIMES[k] - before.get(k, 0)) * 1000, 1) for k in TIMES}
                             | {"commit_ms": round(elapsed, 1),
                                "snapshot": bool(reply.get("commit", {}).get("snapshot_taken"))})
    finally:
        service.close("i")
        shutil.rmtree(work, ignore_errors=True)

    p99 = percentile(commit_ms, 0.99)
    where = "S3 " + args.s3_endpoint if args.s3_endpoint else "local disk"
    print(f"{args.epochs} commits of {args.updates:,} puts on {args.keys:,} keys "
          f"({where}, snapshot every {args.snapshot_interval}):")
    print(f"  commit call p50 {statistics.median(commit_ms):.1f} ms, p99 {p99:.1f} ms, max {max(commit_ms):.1f} ms")
    snap = [e["commit_ms"] for e in per_epoch if e["snapshot"]]
    if snap:
        print(f"  commits that took a snapshot: median {statistics.median(snap):.1f} ms "
              f"({statistics.median(snap) / statistics.median(commit_ms):.2f}x the median commit)")
    print("  time per phase, summed over the measured commits and the following loads:")
    for label, seconds in sorted(TIMES.items(), key=lambda kv: -kv[1]):
        print(f"    {label:<20}{seconds * 1000:>10.1f} ms  ({seconds * 1000 / args.epochs:.1f} ms per epoch)")
    if args.json:
        results.write_json(args.json, {"settings": results.settings(args), "commit_ms": commit_ms,
                                       "phases_ms": {k: v * 1000 for k, v in TIMES.items()}, "per_epoch": per_epoch})
    return 0


def _load(service, opts: str, checkpoint: str, version: int) -> str:
    return service.load("i", checkpoint, opts, version)


if __name__ == "__main__":
    sys.exit(main())
