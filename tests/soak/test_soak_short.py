"""The soak test, short: ``bench/soak.py`` for 90 micro-batches (keyed_process feeding an
aggregation on the provider, snapshots every 5 commits, 10 versions retained, maintenance
every 2 s), then checks that checkpoint storage, local disk, worker memory and open files at
the end are not above their level at batch 30 (after retention has cycled several times)
beyond the bands that snapshots and retention explain. ``python bench/soak.py`` runs the
long version (1,000 batches)."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

SOAK = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench", "soak.py")
BATCHES, EVERY, SNAPSHOT_INTERVAL, RETAINED = 90, 30, 5, 10


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("soak")
    out = workdir / "soak.json"
    proc = subprocess.run(
        [sys.executable, SOAK, "--batches", str(BATCHES), "--sample-every", str(EVERY), "--rows-per-batch", "500",
         "--keys", "2000", "--snapshot-interval", str(SNAPSHOT_INTERVAL), "--retained", str(RETAINED),
         "--workdir", str(workdir / "run"), "--keep", "--json", str(out)],
        capture_output=True, text=True, timeout=1800,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    samples = {s["batch"]: s for s in json.loads(out.read_text())["samples"]}
    assert sorted(samples) == [1, EVERY, 2 * EVERY, BATCHES], sorted(samples)
    return workdir / "run", samples


def _stores(run) -> list[str]:
    """Every VersionedStore directory: the provider's partitions and keyed_process's."""
    return sorted(os.path.dirname(m) for m in glob.glob(str(run / "**" / "manifests"), recursive=True))


def _newest_snapshot_files(store: str) -> int:
    # Descriptors are snapshots/<version>-<id>.json (a snapshot's private files have longer names).
    descriptors = [p for p in glob.glob(os.path.join(store, "snapshots", "*.json"))
                   if re.fullmatch(r"\d+-[0-9a-f]+\.json", os.path.basename(p))]
    newest = max(descriptors, key=lambda p: int(os.path.basename(p).split("-")[0]))
    return len(json.load(open(newest))["files"]) + 1  # its files and the descriptor itself


def test_checkpoint_files_stay_within_the_band_of_retention(soak):
    run, samples = soak
    early, end = samples[EVERY], samples[BATCHES]
    stores = _stores(run)
    assert len(stores) == 4  # 2 provider partitions + 2 keyed_process partitions
    # Per store, a cleanup (after each snapshot, and in maintenance) leaves the RETAINED newest
    # versions; until the next one, up to SNAPSHOT_INTERVAL more commits each add a manifest
    # and a changelog, and the next snapshot's files arrive before the old ones go. So between
    # any two moments the count of a store's files differs by at most 2 * SNAPSHOT_INTERVAL
    # plus one snapshot's files. Anything growing with the batch count breaks this within a
    # few batches (4 stores x 60 batches compared).
    band = sum(2 * SNAPSHOT_INTERVAL + _newest_snapshot_files(s) for s in stores)
    state_early = early["checkpoint_state"]["files"] + early["keyed_state"]["files"]
    state_end = end["checkpoint_state"]["files"] + end["keyed_state"]["files"]
    assert state_end <= state_early + band, (state_early, state_end, band)
    # Spark's own logs (offsets, commits and their .crc files) are purged to
    # minBatchesToRetain each batch: one batch's entries of slack, twice (data and .crc).
    spark_early = early["checkpoint"]["files"] - early["checkpoint_state"]["files"]
    spark_end = end["checkpoint"]["files"] - end["checkpoint_state"]["files"]
    assert spark_end <= spark_early + 8, (spark_early, spark_end)


def test_local_disk_stays_bounded(soak):
    _, samples = soak
    early, end = samples[EVERY], samples[BATCHES]
    for kind in ("local_provider", "local_keyed"):
        # Working copies hold the same key space throughout; what varies is RocksDB's LSM (up
        # to 4 level-0 files before a compaction, and its output), each read view's files
        # (hard links, no bytes), and the rolled info logs (<= 1 MiB per DB). A file or a log
        # line per batch would exceed these within the 60 batches compared.
        assert end[kind]["files"] <= early[kind]["files"] + 40, (kind, early[kind], end[kind])
        assert end[kind]["bytes"] <= 1.5 * early[kind]["bytes"] + 4 * 2**20, (kind, early[kind], end[kind])
    assert end["provider_views"] <= 2 * 2, end["provider_views"]  # VIEWS_KEPT per provider store

    # The provider workers' logs (appended by the JVM, never rotated) get lines per event (a
    # store opened, a run registered), not per call or batch: py4j's line per call added
    # ~30 KB per 100 batches. One 4 KiB block of slack per worker.
    def worker_logs(sample):
        return sum(parts["worker logs"]["bytes"] for parts in sample["local_provider_parts"].values())

    workers = end["processes"]["provider_workers"]["count"]
    assert worker_logs(end) <= worker_logs(early) + 4096 * workers, (worker_logs(early), worker_logs(end))


def test_worker_memory_and_open_files_stay_bounded(soak):
    _, samples = soak
    early, end = samples[EVERY], samples[BATCHES]
    for kind in ("provider_workers", "pyspark_workers"):
        e, n = early["processes"][kind], end["processes"][kind]
        assert n["count"] >= 1, (kind, n)
        # RSS settles once the block cache holds the (fixed) key space; Python's allocator
        # and RocksDB's arenas leave some jitter.
        assert n["max_rss_mb"] <= 1.25 * e["max_rss_mb"] + 32, (kind, e, n)
        assert n["fds"] / n["count"] <= e["fds"] / max(e["count"], 1) + 16, (kind, e, n)
    # The executor JVM holds the provider's read views open (RocksDB read-only instances).
    assert end["processes"]["jvm"]["fds"] <= early["processes"]["jvm"]["fds"] + 32
