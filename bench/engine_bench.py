"""Engine benchmark: spark-state's VersionedStore next to raw rocksdict and a plain dict,
all measured in the same run on the same keys.

Measured, for the hashmap and rocksdb backends:
  * put      -- staging N puts in an epoch (``store.put``)
  * commit   -- committing an epoch of N puts (changelog to checkpoint storage, apply, manifest)
  * get      -- random point reads of existing keys from a state of M keys
  * update   -- an aggregation-style epoch on the M-key state: read N existing keys, write
                them back changed, commit
  * restore  -- loading an M-key version into an empty local directory from checkpoint storage

Baselines: ``dict`` (assignment / lookup), raw ``rocksdict`` with default options (WriteBatch +
write with the WAL off; get; "restore" = copy a RocksDB checkpoint directory and open it),
and for gets also raw rocksdict with the options our rocksdb backend uses (bloom filter,
index and filter blocks in the shared cache), to separate the cost of our layer from
the effect of tuning. Ratios are against raw rocksdict with default options.

Usage: python bench/engine_bench.py [--epoch-keys 100000] [--state-keys 1000000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable

import rocksdict

from harness.stats import median_of
from spark_state import EngineConfig, VersionedStore

KEY_BYTES = 16
VALUE_BYTES = 32


def keys_for(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(KEY_BYTES) for _ in range(n)]


def time_gets(get: Callable[[bytes], object], keys: list[bytes]) -> float:
    """Seconds for one ``get`` per key, in order."""
    t = time.perf_counter()
    for k in keys:
        get(k)
    return time.perf_counter() - t


class Results:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, operation: str, subject: str, seconds: float, ops: int) -> None:
        self.rows.append({"operation": operation, "subject": subject, "seconds": seconds, "ops": ops,
                          "ops_per_s": ops / seconds if seconds else float("inf")})

    def print(self) -> None:
        print(f"\n{'operation':<34} {'subject':<18} {'time':>10} {'ops/s':>14} {'vs rocksdict':>13}")
        by_op: dict[str, dict[str, dict]] = {}
        for row in self.rows:
            by_op.setdefault(row["operation"], {})[row["subject"]] = row
        for op, subjects in by_op.items():
            raw = subjects.get("raw rocksdict")
            for subject, row in subjects.items():
                ratio = f"{row['ops_per_s'] / raw['ops_per_s']:.2f}x" if raw else "-"
                print(f"{op:<34} {subject:<18} {row['seconds'] * 1000:>8.1f}ms {row['ops_per_s']:>14,.0f} {ratio:>13}")


def raw_rocksdb_options() -> rocksdict.Options:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    return opts


def no_wal() -> rocksdict.WriteOptions:
    wo = rocksdict.WriteOptions()
    wo.disable_wal = True
    return wo


def bench_epoch(results: Results, root: str, n: int, runs: int) -> None:
    keys = keys_for(n, 1)
    value = b"v" * VALUE_BYTES

    def dict_put() -> float:
        d: dict = {}
        t = time.perf_counter()
        for k in keys:
            d[k] = value
        return time.perf_counter() - t

    results.add(f"put ({n:,} keys)", "dict", median_of(runs, dict_put), n)

    def raw_epoch() -> tuple[float, float]:
        path = tempfile.mkdtemp(dir=root)
        db = rocksdict.Rdict(path, raw_rocksdb_options())
        t = time.perf_counter()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for k in keys:
            batch.put(k, value)
        staged = time.perf_counter()
        db.write(batch, no_wal())
        done = time.perf_counter()
        db.close()
        shutil.rmtree(path)
        return staged - t, done - staged

    raw = [raw_epoch() for _ in range(runs)]
    results.add(f"put ({n:,} keys)", "raw rocksdict", statistics.median(r[0] for r in raw), n)
    results.add(f"commit epoch of {n:,} puts", "raw rocksdict", statistics.median(r[1] for r in raw), n)

    for backend in ("hashmap", "rocksdb"):
        puts, commits = [], []
        for _ in range(runs):
            ckpt = tempfile.mkdtemp(dir=root)
            cfg = EngineConfig(backend=backend, snapshot_interval=0, local_dir=os.path.join(root, "local"))
            with VersionedStore(ckpt, cfg) as store:
                store.load(0)
                t = time.perf_counter()
                for k in keys:
                    store.put(k, value)
                staged = time.perf_counter()
                store.commit()
                done = time.perf_counter()
            shutil.rmtree(ckpt)
            puts.append(staged - t)
            commits.append(done - staged)
        results.add(f"put ({n:,} keys)", f"store {backend}", statistics.median(puts), n)
        results.add(f"commit epoch of {n:,} puts", f"store {backend}", statistics.median(commits), n)


def tuned_options() -> rocksdict.Options:
    """The options of our rocksdb backend (shared cache, bloom filter), for a raw baseline."""
    from spark_state.backends.rocksdb import _options
    from spark_state.backends.rocksdb_resources import shared_resources

    return _options(shared_resources(256, 128))


def dict_gets(keys: list[bytes], value: bytes, probe: list[bytes], runs: int) -> float:
    """Median seconds of ``probe``'s gets from a dict of ``keys`` (freed on return, before the next
    subject loads its state)."""
    data = dict.fromkeys(keys, value)
    return median_of(runs, lambda: time_gets(data.get, probe))


def bench_state(results: Results, root: str, n: int, gets: int, runs: int, update_n: int) -> None:
    keys = keys_for(n, 2)
    value = b"w" * VALUE_BYTES
    probe = random.Random(3).choices(keys, k=gets)

    results.add(f"get (random, {n:,}-key state)", "dict", dict_gets(keys, value, probe, runs), gets)

    # Raw rocksdict: load, flush, checkpoint (the thing a restore would copy).
    raw_path = os.path.join(root, "raw-db")
    db = rocksdict.Rdict(raw_path, raw_rocksdb_options())
    for i in range(0, n, 100_000):
        batch = rocksdict.WriteBatch(raw_mode=True)
        for k in keys[i:i + 100_000]:
            batch.put(k, value)
        db.write(batch, no_wal())
    db.flush()

    results.add(f"get (random, {n:,}-key state)", "raw rocksdict",
                median_of(runs, lambda: time_gets(db.get, probe)), gets)
    update_keys = probe[:update_n]

    def raw_update() -> float:
        t = time.perf_counter()
        batch = rocksdict.WriteBatch(raw_mode=True)
        for k in update_keys:
            old = db.get(k)
            batch.put(k, old[:-1] + b"x")
        db.write(batch, no_wal())
        return time.perf_counter() - t

    results.add(f"update epoch ({update_n:,} of {n:,} keys)", "raw rocksdict", median_of(runs, raw_update), update_n)
    raw_ckpt = os.path.join(root, "raw-ckpt")
    rocksdict.Checkpoint(db).create_checkpoint(raw_ckpt)
    db.close()

    tuned = rocksdict.Rdict(raw_ckpt, tuned_options())

    results.add(f"get (random, {n:,}-key state)", "raw rocksdict tuned",
                median_of(runs, lambda: time_gets(tuned.get, probe)), gets)
    tuned.close()

    def raw_restore() -> float:
        target = os.path.join(root, "raw-restored")
        t = time.perf_counter()
        shutil.copytree(raw_ckpt, target)
        restored = rocksdict.Rdict(target, raw_rocksdb_options())
        restored.get(keys[0])
        elapsed = time.perf_counter() - t
        restored.close()
        shutil.rmtree(target)
        return elapsed

    results.add(f"restore {n:,}-key version", "raw rocksdict", median_of(runs, raw_restore), n)

    for backend in ("hashmap", "rocksdb"):
        ckpt = os.path.join(root, f"ckpt-{backend}")
        # Snapshots only on request: the update epochs below then cost what an epoch
        # between two periodic snapshots costs.
        cfg = EngineConfig(backend=backend, snapshot_interval=0, local_dir=os.path.join(root, "local"))
        with VersionedStore(ckpt, cfg) as store:
            store.load(0)
            store.put_many(keys, (value for _ in keys))
            version = store.commit()
            store.snapshot()  # version 1 now restores from a snapshot alone

            results.add(f"get (random, {n:,}-key state)", f"store {backend}",
                        median_of(runs, lambda: time_gets(store.get, probe)), gets)

            def store_update() -> float:
                t = time.perf_counter()
                get, put = store.get, store.put
                for k in update_keys:
                    put(k, get(k)[:-1] + b"x")
                store.commit()
                return time.perf_counter() - t

            results.add(f"update epoch ({update_n:,} of {n:,} keys)", f"store {backend}",
                        median_of(runs, store_update), update_n)

        def store_restore(ckpt=ckpt, cfg=cfg, version=version) -> float:
            with VersionedStore(ckpt, cfg) as fresh:
                t = time.perf_counter()
                fresh.load(version)
                fresh.get(keys[0])
                elapsed = time.perf_counter() - t
                assert fresh.last_restore.mode == "restore"
            return elapsed

        results.add(f"restore {n:,}-key version", f"store {backend}", median_of(runs, store_restore), n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epoch-keys", type=int, default=100_000)
    parser.add_argument("--state-keys", type=int, default=1_000_000)
    parser.add_argument("--gets", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    results = Results()
    root = tempfile.mkdtemp(prefix="spark-state-bench-")
    try:
        print(f"epoch benchmark: {args.epoch_keys:,} puts, median of {args.runs} runs", flush=True)
        bench_epoch(results, root, args.epoch_keys, args.runs)
        print(f"state benchmark: {args.state_keys:,} keys, {args.gets:,} random gets", flush=True)
        bench_state(results, root, args.state_keys, args.gets, args.runs, args.epoch_keys)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results.print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results.rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
