"""Savepoint state files written and read in bounded memory (no Spark): the one writer
(:func:`~spark_state.ops.state_files.write_state_file`) and the verified, memory-mapped reader
(:func:`~spark_state.ops.state_files.read_state_batches`), on local storage (read in place) and
on a storage that is not local (downloaded to a scratch directory, deleted after)."""

from __future__ import annotations

import io
import os
import struct
import tracemalloc
from typing import Iterator

import pyarrow as pa
import pytest

from spark_state.checkpoint.checksum import crc32_file
from spark_state.keys import system as syskeys
from spark_state.ops import savepoint_format as F
from spark_state.ops import state_files as S
from spark_state.ops.errors import SavepointError
from spark_state.ops.resplit import Split
from spark_state.partitioning.spark_hash import spark_key_group, spark_partition_id
from spark_state.storage import CheckpointStorage, LocalStorage, open_storage

PATH = F.process_file("fn", 0)


class NotLocal(CheckpointStorage):
    """A storage that is not :class:`LocalStorage` (as S3 or HDFS are), over a local directory,
    recording which files were read whole."""

    def __init__(self, root: str) -> None:
        self.inner = LocalStorage(root)
        self.url = "remote://" + root
        self.read_whole: list[str] = []

    def read_bytes(self, path: str) -> bytes:
        self.read_whole.append(path)
        return self.inner.read_bytes(path)

    def download_file(self, path: str, local_path: str) -> None:
        self.inner.download_file(path, local_path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def size(self, path: str) -> int:
        return self.inner.size(path)

    def list_dir(self, path: str = "", *, temp_files: bool = False) -> list[str]:
        return self.inner.list_dir(path, temp_files=temp_files)

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = True) -> None:
        self.inner.write_bytes(path, data, overwrite=overwrite)

    def upload_file(self, local_path: str, path: str) -> None:
        self.inner.upload_file(local_path, path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def child(self, subpath: str) -> "NotLocal":
        return NotLocal(os.path.join(self.inner.root, subpath))


def _entries(n: int, value_bytes: int = 16) -> Iterator[tuple[bytes, bytes]]:
    """``n`` data entries in key order, then a system entry (a TTL marker)."""
    pad = b"v" * max(0, value_bytes - 8)
    for i in range(n):
        yield b"\x00\x01" + i.to_bytes(8, "big"), i.to_bytes(8, "big") + pad
    yield syskeys.marker_key(b""), b"ttl:1"


def _manifest(*entries: F.FileEntry) -> F.SavepointManifest:
    return F.SavepointManifest(source="/ck", query_id="q", batch_id=0, provider_class="p", partitions=1,
                               files=list(entries))


@pytest.mark.parametrize("remote", [False, True], ids=["local", "not-local"])
def test_a_state_file_round_trips_across_record_batches_checked(tmp_path, remote):
    storage: CheckpointStorage = NotLocal(str(tmp_path / "sp")) if remote else open_storage(str(tmp_path / "sp"))
    n = 2 * F.BATCH_ROWS + 1000
    seen: list[int] = []
    entry = S.write_state_file(storage, PATH, _entries(n), scratch_dir=str(tmp_path / "spool"), on_batch=seen.append)
    on_disk = str(tmp_path / "sp" / PATH)
    assert (entry.path, entry.rows, entry.keys) == (PATH, n + 1, n)
    assert (entry.size, entry.crc32) == (os.path.getsize(on_disk), crc32_file(on_disk))
    assert seen == [F.BATCH_ROWS, F.BATCH_ROWS, 1001]

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    manifest = _manifest(entry)
    batches = S.read_state_batches(storage, manifest, PATH, str(scratch))
    assert len(os.listdir(scratch)) == (1 if remote else 0)  # fetched and checked at the call
    assert [b.num_rows for b in batches] == [F.BATCH_ROWS, F.BATCH_ROWS, 1001]
    assert os.listdir(scratch) == []  # the local copy is deleted once read
    assert list(S.read_state_entries(storage, manifest, PATH, str(scratch))) == list(_entries(n))
    early = S.read_state_entries(storage, manifest, PATH, str(scratch))
    next(early)
    early.close()
    assert os.listdir(scratch) == []  # and when the reader is closed early
    assert list(S.read_unlisted_entries(storage, PATH, str(scratch)))[-3:] == list(_entries(n))[-3:]

    # a copy streams through the checked local file
    target = open_storage(str(tmp_path / "copy"))
    S.copy_verified(storage, manifest, PATH, target, scratch_dir=str(scratch))
    assert (tmp_path / "copy" / PATH).read_bytes() == (tmp_path / "sp" / PATH).read_bytes()
    if remote:
        assert storage.read_whole == []  # type: ignore[attr-defined]  # never read whole


@pytest.mark.parametrize("remote", [False, True], ids=["local", "not-local"])
def test_a_damaged_state_file_is_refused_before_it_is_used(tmp_path, remote):
    storage: CheckpointStorage = NotLocal(str(tmp_path / "sp")) if remote else open_storage(str(tmp_path / "sp"))
    entry = S.write_state_file(storage, PATH, _entries(1000))
    manifest = _manifest(entry)
    where = storage.full_url(PATH)
    on_disk = tmp_path / "sp" / PATH
    data = on_disk.read_bytes()

    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    on_disk.write_bytes(bytes(flipped))
    with pytest.raises(SavepointError, match=f"^{where} has CRC-32 0x[0-9a-f]{{8}}, the savepoint manifest says "
                                             f"{entry.crc32:#010x}: the savepoint is damaged; take a new one$"):
        S.read_state_batches(storage, manifest, PATH)  # at the call, before any batch is asked for
    with pytest.raises(SavepointError, match="has CRC-32"):
        S.copy_verified(storage, manifest, PATH, open_storage(str(tmp_path / "copy")))
    assert not (tmp_path / "copy" / PATH).exists()

    on_disk.write_bytes(data[:-100])
    with pytest.raises(SavepointError, match=f"^{where} is {len(data) - 100} bytes, the savepoint manifest says "
                                             f"{len(data)}: the savepoint is damaged \\(truncated or changed\\)"):
        S.read_state_entries(storage, manifest, PATH)

    on_disk.unlink()
    with pytest.raises(SavepointError, match=f"^{where} is missing: the savepoint is incomplete or damaged"):
        S.read_state_batches(storage, manifest, PATH)
    with pytest.raises(SavepointError, match="lists no file"):
        S.read_state_batches(storage, manifest, F.process_file("fn", 1))

    # listed with its own size and CRC-32, but not an Arrow file
    on_disk.write_bytes(b"not arrow")
    junk = F.FileEntry(PATH, 9, F.crc32(b"not arrow"))
    with pytest.raises(SavepointError, match="is not a readable Arrow IPC file"):
        list(S.read_state_batches(storage, _manifest(junk), PATH))


def test_the_codec_writes_to_a_file_object_and_reads_a_mapped_file(tmp_path):
    sink = io.BytesIO()
    assert F.write_entries(sink, iter(())) == (0, 0)
    (tmp_path / "empty.arrow").write_bytes(sink.getvalue())
    assert [b.num_rows for b in F.read_batches(str(tmp_path / "empty.arrow"), "e")] == [0]  # one empty batch

    sink = io.BytesIO()
    assert F.write_entries(sink, _entries(F.BATCH_ROWS)) == (F.BATCH_ROWS + 1, F.BATCH_ROWS)
    (tmp_path / "full.arrow").write_bytes(sink.getvalue())
    assert [b.num_rows for b in F.read_batches(str(tmp_path / "full.arrow"), "f")] == [F.BATCH_ROWS, 1]

    # large values: a batch ends at about BATCH_BYTES, not only at BATCH_ROWS
    sink = io.BytesIO()
    big = 1 << 20
    F.write_entries(sink, ((b"\x00\x00%03d" % i, b"x" * big) for i in range(80)))
    (tmp_path / "big.arrow").write_bytes(sink.getvalue())
    rows = [b.num_rows for b in F.read_batches(str(tmp_path / "big.arrow"), "b")]
    assert sum(rows) == 80 and max(rows) == F.BATCH_BYTES // (big + 5) + 1
    reader = pa.ipc.open_file(str(tmp_path / "big.arrow"))
    assert reader.schema.metadata == {b"spark_state.savepoint": b"1"}


def test_writing_and_reading_a_large_state_file_takes_bounded_memory(tmp_path):
    """120k entries of 2.4 KB (a file of ~290 MB): the peak of Python's allocations stays far below
    the file's size, writing (one record batch and the spool's memory) and reading (one batch's
    entries); reading allocates no Arrow memory at all (the batches are views of the mapped file)."""
    n = 120_000
    storage = NotLocal(str(tmp_path / "sp"))
    # modules the codec imports on first use are loaded before measuring
    warm = S.write_state_file(storage, PATH, _entries(10), scratch_dir=str(tmp_path / "spool"))
    assert len(list(S.read_state_entries(storage, _manifest(warm), PATH, str(tmp_path)))) == 11

    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        entry = S.write_state_file(storage, PATH, _entries(n, value_bytes=2400), scratch_dir=str(tmp_path / "spool"))
        _, write_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        arrow_base = pa.total_allocated_bytes()
        arrow_peak = count = 0
        for batch in S.read_state_batches(storage, _manifest(entry), PATH, str(tmp_path)):
            arrow_peak = max(arrow_peak, pa.total_allocated_bytes() - arrow_base)
            for k, _v in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                count += k[:1] != syskeys.SYSTEM_PREFIX
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert entry.size > 250 << 20 and (entry.rows, entry.keys) == (n + 1, n) and count == n
    assert write_peak - base < entry.size / 3, (write_peak - base, entry.size)
    assert read_peak - base < entry.size / 3, (read_peak - base, entry.size)
    assert arrow_peak < 1 << 20, arrow_peak
    assert os.listdir(tmp_path / "spool") == [] and storage.read_whole == []
    os.unlink(tmp_path / "sp" / PATH)  # pytest keeps the last runs' temporary directories


def test_a_resplit_spools_its_rows_to_one_local_file_deleted_on_close(tmp_path):
    """Restore and rescale re-split a store through :class:`Split`, which holds no rows in memory:
    it appends each partition's part of a batch to a local Arrow file and reads them back mapped."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    keys = [struct.pack(">Hi", spark_key_group(h, 32768), h) + b"row%d" % i
            for i, h in enumerate(range(-5000, 5000, 7))]
    marker = syskeys.marker_key(b"")
    with Split(3, scratch_dir=str(scratch)) as split:
        for lo in range(0, len(keys), 500):
            chunk = ([marker] if lo == 0 else []) + keys[lo:lo + 500]
            split.add(pa.record_batch([pa.array(chunk, pa.binary()), pa.array([b"v"] * len(chunk), pa.binary())],
                                      schema=F.SCHEMA))
        split.add(pa.record_batch([pa.array([], pa.binary()), pa.array([], pa.binary())], schema=F.SCHEMA))
        assert len(os.listdir(scratch)) == 1 and split.rows == len(keys) + 1
        for p in range(3):
            got = [k for k, _ in split.entries(p)]
            want = [k for k, h in zip(keys, range(-5000, 5000, 7)) if spark_partition_id(h, 3) == p]
            assert got == [marker] + want  # every partition gets the marker; rows in the order added
            assert split.rows_of(p) == len(got)
    assert os.listdir(scratch) == []
    with Split(2, single_partition=True, scratch_dir=str(scratch)) as one:
        assert list(one.entries(0)) == [] and list(one.batches(1)) == []  # nothing added: no file
        one.add(pa.record_batch([pa.array(keys[:10], pa.binary()), pa.array([b"v"] * 10, pa.binary())],
                                schema=F.SCHEMA))
        assert [k for k, _ in one.entries(0)] == keys[:10] and list(one.entries(1)) == []
        with pytest.raises(RuntimeError, match="being read"):
            one.add(pa.record_batch([pa.array(keys[:1], pa.binary()), pa.array([b"v"], pa.binary())],
                                    schema=F.SCHEMA))
    assert os.listdir(scratch) == []


def test_schema_records_are_read_from_the_end_of_a_state_file(tmp_path, monkeypatch):
    """The records (system keys, which sort last) come from the last record batches only: the
    data batches before them are not read."""
    storage = open_storage(str(tmp_path / "sp"))
    n = 3 * F.BATCH_ROWS
    records = [(syskeys.keyed_record_key(b"count"), b"{}"), (syskeys.operator_record_key(b"split"), b"{}"),
               (syskeys.marker_key(b"count"), b"ttl:1")]
    data = [(b"\x00\x01" + i.to_bytes(8, "big"), b"v") for i in range(n)]
    entry = S.write_state_file(storage, PATH, iter(sorted(data + records)))
    read: list[int] = []
    batches = F.read_batches

    def counting(path, where, reverse=False):
        for batch in batches(path, where, reverse):
            read.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(F, "read_batches", counting)
    found = sorted(S.read_record_entries(storage, _manifest(entry), PATH))
    assert found == sorted(r for r in records if r[0] >= syskeys.keyed_record_key(b""))
    assert read == [3]  # the last batch (the records and the marker) only
