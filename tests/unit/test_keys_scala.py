"""The JVM shim repeats a few facts of the stored-key layout; they must agree with
``spark_state.keys`` (read from the Scala source, no JVM needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_state.keys.keygroup_prefix import KEY_GROUP_PREFIX_BYTES
from spark_state.keys.provider import HASH_BYTES, HEADER_BYTES, MAX_PARALLELISM
from spark_state.keys.system import SYSTEM_PREFIX
from spark_state.partitioning.spark_hash import SPARK_HASH_SEED
from spark_state.ttl.codec import STAMP_BYTES

SHIM = Path(__file__).resolve().parents[2] / "jvm-shim" / "src" / "main" / "scala"


def _source(name: str) -> str:
    found = sorted(SHIM.rglob(name))
    assert len(found) == 1, f"expected one {name} under {SHIM}, found {found}"
    return found[0].read_text(encoding="utf-8")


def _int_val(source: str, name: str) -> int:
    match = re.search(rf"\bval\s+{name}\s*(?::\s*Int\s*)?=\s*(\d+)\b", source)
    assert match, f"no `val {name} = <int>` in the Scala source"
    return int(match.group(1))


def test_key_codec_constants_agree_with_the_keys_package() -> None:
    codec = _source("KeyCodec.scala")
    assert _int_val(codec, "MaxParallelism") == MAX_PARALLELISM
    assert _int_val(codec, "SparkHashSeed") == SPARK_HASH_SEED
    assert _int_val(codec, "HeaderBytes") == HEADER_BYTES == KEY_GROUP_PREFIX_BYTES + HASH_BYTES


def test_key_codec_header_writes_the_key_group_then_the_hash() -> None:
    codec = _source("KeyCodec.scala")
    body = re.search(r"def writeHeader\(.*?\n  \}", codec, re.S)
    assert body, "no writeHeader in KeyCodec.scala"
    text = body.group(0)
    # key group: two bytes, big-endian, at offsets 0 and 1
    assert re.search(r"out\(0\)\s*=\s*\(kg\s*>>>\s*8\)\.toByte", text)
    assert re.search(r"out\(1\)\s*=\s*kg\.toByte", text)
    assert not re.search(rf"out\({KEY_GROUP_PREFIX_BYTES}\)", text)
    # then the hash, an int32 at the end of the key-group prefix
    assert re.search(rf"writeInt\(out,\s*{KEY_GROUP_PREFIX_BYTES},\s*hash\)", text)
    # writeInt is big-endian
    write_int = re.search(r"def writeInt\(.*?\n  \}", codec, re.S)
    assert write_int and re.search(r"out\(at\)\s*=\s*\(v\s*>>>\s*24\)", write_int.group(0))


@pytest.mark.parametrize("name", ["RocksResources.scala", "OpsBridge.scala"])
def test_the_shim_skips_the_same_system_keyspace(name: str) -> None:
    source = _source(name)
    firsts = {int(b, 16) for b in re.findall(r"0x([0-9a-fA-F]{2})\.toByte", source)}
    assert firsts == {SYSTEM_PREFIX[0]}, f"{name} names {sorted(firsts)} as the system keyspace's first byte"


def test_the_shim_stamp_width_agrees_with_the_ttl_codec() -> None:
    assert _int_val(_source("TtlView.scala"), "StampBytes") == STAMP_BYTES
