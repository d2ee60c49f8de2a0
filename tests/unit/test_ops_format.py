"""Pure parts of the operations tools, without Spark: the engine's import_version (and how
run ranks make its copy the valid one), the savepoint codec and its checks, the provider
re-split against Spark's partitioning formula, and Spark's checkpoint files."""

from __future__ import annotations

import io
import json
import random
import struct

import pyarrow as pa
import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.checkpoint.runs import RunContext, RunRegistry
from spark_state.keys import system as syskeys
from spark_state.ops import savepoint_format as F
from spark_state.ops.checkpoint_reader import parse_schema_file
from spark_state.spark.logs import OffsetEntry
from spark_state.ops.errors import SavepointError
from spark_state.ops.resplit import Split, partition_of_rows
from spark_state.partitioning.spark_hash import spark_key_group, spark_partition_id
from spark_state.storage import open_storage


def _provider_key(h: int, row: bytes) -> bytes:
    return struct.pack(">Hi", spark_key_group(h, 32768), h) + row


def test_import_version_creates_a_store_at_a_version_as_a_tool_run(tmp_path):
    storage = open_storage(str(tmp_path / "s"))
    config = EngineConfig(snapshot_interval=0)
    # a query run committed versions 1..3 (3: an attempt of a batch that never reached Spark's commit log)
    with VersionedStore(storage, config, runs=RunContext(RunRegistry(storage), "run-a")) as s:
        s.load(0)
        for i in range(3):
            s.put(b"k%d" % i, b"old")
            s.commit()
    entries = [(b"k%d" % i, b"new%d" % i) for i in range(5)] + [(syskeys.marker_key(b""), b"ttl:1")]
    with VersionedStore(storage, config, runs=RunContext(RunRegistry(storage), "tool")) as tool:
        manifest = tool.import_version(3, iter(entries), batch_rows=2)
        assert manifest.version == 3 and manifest.num_keys == 5 and manifest.replay == ()
        assert manifest.base_snapshot is not None and tool.get(b"k4") == b"new4"
        again = tool.import_version(3, iter([(b"x", b"y")]))  # the same tool run again: its copy is kept
        assert again.commit_id == manifest.commit_id
    # the next real run (and any reader) loads the tool's copy, not run-a's abandoned one
    with VersionedStore(storage, config, runs=RunContext(RunRegistry(storage), None)) as reader:
        reader.load(3)
        assert dict(reader.iterate()) == dict(entries) and reader.num_keys() == 5
    with VersionedStore(storage, config, runs=RunContext(RunRegistry(storage), "run-b")) as nxt:
        nxt.load(3)
        nxt.put(b"k9", b"v")
        assert nxt.commit() == 4
    with pytest.raises(ValueError):
        VersionedStore(str(tmp_path / "t"), config).import_version(0, [])


def test_savepoint_state_file_round_trip_and_checks(tmp_path):
    entries = [(b"\x00\x01" + bytes([i]), b"v" * i) for i in range(10)] + [(b"\xff\x02\x00", b"ttl:1")]
    sink = io.BytesIO()
    rows, keys = F.write_entries(sink, iter(entries))
    data = sink.getvalue()
    assert (rows, keys) == (11, 10)
    (tmp_path / "f.arrow").write_bytes(data)
    assert list(F.read_entries(str(tmp_path / "f.arrow"), "f")) == entries
    entry = F.FileEntry("f", len(data), F.crc32(data), rows, keys)
    F.verify(data, entry, "/sp/f")
    with pytest.raises(SavepointError, match="/sp/f is 3 bytes"):
        F.verify(data[:3], entry, "/sp/f")
    flipped = bytearray(data)
    flipped[40] ^= 1
    with pytest.raises(SavepointError, match="/sp/f has CRC-32"):
        F.verify(bytes(flipped), entry, "/sp/f")
    empty = io.BytesIO()
    assert F.write_entries(empty, iter(())) == (0, 0)
    (tmp_path / "e.arrow").write_bytes(empty.getvalue())
    assert list(F.read_entries(str(tmp_path / "e.arrow"), "e")) == []


def test_manifest_round_trip_and_refusals():
    m = F.SavepointManifest(source="/ck", query_id="q", batch_id=4, provider_class="p", partitions=3,
                            operators=[F.OperatorEntry(0, "dedupe", 3, [F.StoreEntry("default", 0, {}, {})])],
                            files=[F.FileEntry("state/0/default/0.arrow", 10, 1, 2, 2)])
    back = F.SavepointManifest.from_json(m.to_json(), "sp.json")
    assert back == m and back.state_version == 5 and json.loads(m.to_json())["state_version"] == 5
    with pytest.raises(SavepointError, match="not valid JSON"):
        F.SavepointManifest.from_json(b"{", "sp.json")
    with pytest.raises(SavepointError, match="format 9"):
        F.SavepointManifest.from_json(json.dumps({"kind": F.KIND, "format_version": 9}).encode(), "sp.json")
    # manifests of formats 1 (no process placement) and 2 (no key columns) still load; today's writes format 3
    key = {"columns": ["user"], "types": ["string"]}
    proc = F.ProcessEntry("Fn", "keyed", 128, 4, "/state/q/Fn", "/state", "root", key)
    doc = json.loads(F.SavepointManifest(source="/ck", query_id="q", batch_id=1, provider_class="p", partitions=1,
                                         process=[proc]).to_json())
    assert doc["format_version"] == 3 and doc["process"][0]["key"] == key
    doc["format_version"] = 2
    del doc["process"][0]["key"]
    assert F.SavepointManifest.from_json(json.dumps(doc).encode(), "sp.json").process[0].key is None
    doc["format_version"] = 1
    del doc["process"][0]["placement"]
    old = F.SavepointManifest.from_json(json.dumps(doc).encode(), "sp.json")
    assert old.process[0].placement == "" and old.process[0].under_root == "/state"


def test_resplit_follows_sparks_partitioning_and_carries_system_keys():
    rng = random.Random(1)
    hashes = [rng.randrange(-2 ** 31, 2 ** 31) for _ in range(2000)]
    keys = [_provider_key(h, b"row%d" % i) for i, h in enumerate(hashes)]
    index = [syskeys.index_key(b"", 60_000, k) for k in keys[:50]]
    marker = syskeys.marker_key(b"")
    for n in (1, 2, 3, 5, 7, 128):
        parts = partition_of_rows(pa.array(keys + index + [marker], pa.binary()), n)
        assert list(parts[:2000]) == [spark_partition_id(h, n) for h in hashes]
        assert list(parts[2000:2050]) == [spark_partition_id(h, n) for h in hashes[:50]]
        assert parts[-1] == -1
    split = Split(3)
    split.add(pa.record_batch([pa.array(keys + [marker], pa.binary()), pa.array([b"v"] * 2001, pa.binary())],
                              schema=F.SCHEMA))
    for p in range(3):
        got = [k for k, _ in split.entries(p)]
        assert marker in got and len(got) - 1 == sum(1 for h in hashes if spark_partition_id(h, 3) == p)


def test_spark_files():
    entry = OffsetEntry.decode(3, b'v1\n{"batchWatermarkMs":0,"conf":{"spark.sql.shuffle.partitions":"3"}}\n{"logOffset":2}',
                               "offsets/3")
    assert entry.conf["spark.sql.shuffle.partitions"] == "3" and entry.source_lines == ('{"logOffset":2}',)
    changed = OffsetEntry.decode(4, entry.with_conf(**{"spark.sql.shuffle.partitions": "5"}).encode(), "o")
    assert changed.conf["spark.sql.shuffle.partitions"] == "5" and changed.source_lines == entry.source_lines

    def utf(s: str) -> bytes:
        b = s.encode()
        return struct.pack(">H", len(b)) + b

    key, value = {"type": "struct", "fields": []}, {"type": "struct", "fields": [{"name": "v"}]}
    v2 = utf("v2") + struct.pack(">i", 1) + utf(json.dumps(key)) + struct.pack(">i", 2) + \
        utf(json.dumps(value)[:10]) + utf(json.dumps(value)[10:])
    assert parse_schema_file(v2, "schema") == (key, value)
    assert parse_schema_file(utf("v1") + utf(json.dumps(key)) + utf(json.dumps(value)), "s") == (key, value)
