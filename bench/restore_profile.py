"""Where one store's recovery goes: a provider store restored on empty local disks, without Spark.

Drives :class:`spark_state.provider.service.StoreService` the way the JVM shim does. First (not
measured) it fills one store with ``--keys`` keys in epochs of 250k puts, snapshotting every
``--snapshot-interval`` commits, then commits ``--tail-epochs`` epochs of ``--updates`` puts after the
last snapshot (what a restore replays). Then, as a new executor would, a second service with an
empty local directory loads the last version and exports it for the JVM's view, and the profile
prints the time of each phase (wrapping the functions that do the work) and what the load reply
reports (``restore``: mode, files and bytes fetched, changelog bytes replayed).

* ``download``   -- the base snapshot's files brought to local disk (and checked)
* ``open``       -- RocksDB opening the snapshot
* ``replay``     -- the changelogs after the snapshot applied
* ``view export``-- the version exported for the JVM (a RocksDB checkpoint: flush and hard links)

``--s3`` puts the checkpoint on S3: a moto server started on loopback, behind the test suite's
proxy (``tests/faults/s3proxy.py``) adding ``--latency-ms`` to every request and capping the
bandwidth of the link all requests share at ``--bandwidth-mbps`` (as a remote store does); the
profile then also prints the requests and bytes each restore made. ``--rounds`` repeats the
restore (a new empty local directory each time) and reports medians.

Usage: python bench/restore_profile.py [--keys 2000000] [--tail-epochs 4] [--updates 250000]
           [--rounds 3] [--s3 [--latency-ms 20] [--bandwidth-mbps 800]] [--json out.json]
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

from commit_profile import changes_file  # the shim's changes file, as the commit profile writes it
from harness import moto, results, stats
from harness.phases import PhaseTimes

PHASES = PhaseTimes()
TIMES = PHASES.seconds
_wrap = PHASES.wrap


def instrument() -> None:
    from spark_state.backends import rocksdb as rocks
    from spark_state.engine import restore
    from spark_state.engine import store as store_mod

    # each where its caller looks it up

    _wrap(restore, "download_snapshot", "download")
    _wrap(rocks.RocksDBBackendFactory, "open_snapshot", "open")
    _wrap(store_mod, "replay_changelog", "replay")
    _wrap(store_mod.VersionedStore, "export_view", "view export")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=2_000_000, help="keys in the store")
    parser.add_argument("--snapshot-interval", type=int, default=5)
    parser.add_argument("--tail-epochs", type=int, default=4, help="epochs committed after the last snapshot")
    parser.add_argument("--updates", type=int, default=250_000, help="puts per tail epoch")
    parser.add_argument("--rounds", type=stats.rounds, default=3)
    parser.add_argument("--s3", action="store_true", help="checkpoint on a local moto S3 server behind a shaping proxy")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="--s3: added to every request")
    parser.add_argument("--bandwidth-mbps", type=float, default=800.0, help="--s3: the shared link's megabits/s")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    from spark_state.provider.service import StoreService

    work = tempfile.mkdtemp(prefix="restore-profile-")
    options = {"engine": {"snapshotInterval": str(args.snapshot_interval)}, "localDir": os.path.join(work, "local"),
               "runId": str(uuid.uuid4()), "operatorId": 0, "storeName": "default"}
    s3 = S3Server() if args.s3 else None
    if s3 is not None:
        checkpoint = s3.bucket_url() + "/state/0/0"
        options["storage"] = s3.options()
    else:
        checkpoint = os.path.join(work, "ckpt")
    rng = np.random.default_rng(7)
    rounds: list[dict] = []
    try:
        opts = json.dumps(options)
        writer = StoreService()
        version = 0
        _checked(writer.load("w", checkpoint, opts, version))
        chunks = np.array_split(np.arange(args.keys), max(1, args.keys // 250_000))
        # fill, then pad with empty-ish epochs so that the tail starts right after a snapshot
        epochs = [c for c in chunks]
        while (len(epochs)) % args.snapshot_interval:
            epochs.append(rng.choice(args.keys, size=1000, replace=False))
        epochs += [rng.choice(args.keys, size=args.updates, replace=False) for _ in range(args.tail_epochs)]
        for keys in epochs:
            path = os.path.join(work, "epoch.arrow")
            changes_file(path, keys, 16, rng)
            _checked(writer.commit("w", checkpoint, opts, version, path, -1))
            version += 1
            _checked(writer.load("w", checkpoint, opts, version))
        writer.close("w")
        instrument()
        if s3 is not None:  # from now on the store is remote: latency and a shared link
            s3.proxy.latency_s, s3.proxy.bytes_per_s = args.latency_ms / 1000, args.bandwidth_mbps * 1e6 / 8
        for r in range(args.rounds):
            TIMES.clear()
            before = (len(s3.proxy.records), s3.proxy.bytes_moved) if s3 is not None else (0, 0)
            local = os.path.join(work, f"restore-{r}")
            restore_opts = json.dumps(dict(options, localDir=local))
            service = StoreService()
            started = time.perf_counter()
            reply = _checked(service.load("r", checkpoint, restore_opts, version))
            total = time.perf_counter() - started
            service.close("r")
            shutil.rmtree(local, ignore_errors=True)
            rounds.append({"total_ms": total * 1000, "phases_ms": {k: v * 1000 for k, v in TIMES.items()},
                           "restore": reply.get("restore")})
            if s3 is not None:
                rounds[-1]["requests"] = len(s3.proxy.records) - before[0]
                rounds[-1]["bytes_moved"] = s3.proxy.bytes_moved - before[1]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if s3 is not None:
            s3.stop()

    where = (f"S3 (moto) behind {args.latency_ms:g} ms per request and a {args.bandwidth_mbps:g} Mbit/s link"
             if s3 is not None else "local disk")
    print(f"restore of one store of {args.keys:,} keys at version {version} ({where}; "
          f"{args.tail_epochs} epochs of {args.updates:,} puts after the last snapshot), {args.rounds} rounds:")
    totals = [r["total_ms"] for r in rounds]
    print(f"  load call: median {statistics.median(totals):.0f} ms (min {min(totals):.0f}, max {max(totals):.0f})")
    for label in sorted({k for r in rounds for k in r["phases_ms"]}, key=lambda k: -rounds[0]["phases_ms"].get(k, 0)):
        values = [r["phases_ms"].get(label, 0.0) for r in rounds]
        print(f"    {label:<12} median {statistics.median(values):>8.0f} ms")
    print(f"  the load reply's restore figures (last round): {rounds[-1]['restore']}")
    if s3 is not None:
        print(f"  S3 requests per restore: {statistics.median(r['requests'] for r in rounds):.0f}, bytes moved: "
              f"{statistics.median(r['bytes_moved'] for r in rounds) / 1e6:.1f} MB")
    if args.json:
        results.write_json(args.json, {"settings": results.settings(args), "rounds": rounds})
    return 0


class S3Server:
    """A moto S3 server on loopback with the fault proxy of ``tests/faults`` in front (shaping off
    until set), and one bucket."""

    def __init__(self) -> None:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "faults"))
        from s3proxy import FaultProxy

        self._moto, upstream = moto.start_server()
        self.proxy = FaultProxy(upstream).start()
        self.bucket = moto.create_bucket(upstream, "restore")

    def bucket_url(self) -> str:
        return f"s3://{self.bucket}"

    def options(self) -> dict:
        return moto.storage_options(self.proxy.endpoint)

    def stop(self) -> None:
        self.proxy.stop()
        self._moto.terminate()


def _checked(raw: str) -> dict:
    reply = json.loads(raw)
    if "error" in reply:
        raise RuntimeError(f"{reply['error']}: {reply['message']}")
    return reply


if __name__ == "__main__":
    sys.exit(main())
