"""spark_hash / spark_partition_id against what Spark itself computes.

One DataFrame holds many rows of every supported type (with nulls); one job computes
``F.hash`` for each column and for multi-column combinations, and one job per
(partition count, key columns) reads ``spark_partition_id()`` after ``repartition(n, *cols)``.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from spark_state.partitioning.spark_hash import spark_hash, spark_partition_id

pytestmark = pytest.mark.spark

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

COLUMN_TYPES = {
    "b": "boolean",
    "t": "byte",
    "s": "short",
    "i": "int",
    "l": "long",
    "f": "float",
    "d": "double",
    "str": "string",
    "bin": "binary",
}

COMBINATIONS = [
    ("i", "str"),
    ("l", "d", "bin", "b"),
    ("t", "s", "f", "str", "bin"),
    ("str", "str"),
    tuple(COLUMN_TYPES),
]


def _with_nulls(values: list[Any], rng: random.Random) -> list[Any]:
    """Insert a few nulls at random positions (and one at the front)."""
    out = [None] + list(values)
    for _ in range(3):
        out.insert(rng.randrange(len(out) + 1), None)
    return out


def _strings(rng: random.Random) -> list[str]:
    alphabets = ["abcdefghijklmnop", "é", "aé日😀", "日本語テキスト", "😀🙂", "\x00\x7f\u00ff\u0800"]
    values = [(alphabet * 13)[:n] for alphabet in alphabets for n in range(13)]
    pool = "az09 é日😀\u0100\uffff"
    values += ["".join(rng.choice(pool) for _ in range(rng.randrange(13))) for _ in range(30)]
    return values


def _binaries(rng: random.Random) -> list[bytes]:
    values = [bytes(range(0x7C, 0x7C + n)) for n in range(13)]  # crosses 0x7f -> 0x80 in the tail
    values += [b"\xff" * n for n in range(13)]
    values += [bytes(rng.randrange(256) for _ in range(rng.randrange(13))) for _ in range(40)]
    return values


def _floats(rng: random.Random) -> list[float]:
    special = [
        0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.0, -1.0, 1.5, 0.1, -2.75,
        3.4028234663852886e38,  # Float.MAX_VALUE
        1.401298464324817e-45,  # Float.MIN_VALUE (subnormal)
        1.1754943508222875e-38,  # Float.MIN_NORMAL
        16777217.0,  # 2**24 + 1: rounds when narrowed to float32
        1e300,  # overflows to Infinity when narrowed
        -1e-50,  # narrows to -0.0f
    ]
    return special + [rng.uniform(-1e6, 1e6) for _ in range(40)] + [rng.uniform(-1, 1) for _ in range(20)]


def _doubles(rng: random.Random) -> list[float]:
    special = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.0, -1.0, 1.5, 0.1,
               5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308]
    random_bits = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(40)]
    finite_bits = [x for x in random_bits if x == x]
    return special + finite_bits + [rng.uniform(-1e9, 1e9) for _ in range(20)]


def _column_values() -> dict[str, list[Any]]:
    rng = random.Random(20240611)
    raw: dict[str, list[Any]] = {
        "b": [True, False],
        "t": list(range(-128, 128)),
        "s": [-32768, -32767, -1, 0, 1, 255, 256, 32767] + [rng.randint(-32768, 32767) for _ in range(40)],
        "i": [INT_MIN, INT_MIN + 1, -1, 0, 1, 42, 127, 128, 65535, INT_MAX - 1, INT_MAX]
        + [rng.randint(INT_MIN, INT_MAX) for _ in range(80)],
        "l": [LONG_MIN, LONG_MIN + 1, INT_MIN - 1, -1, 0, 1, INT_MAX + 1, 2**32, LONG_MAX]
        + [rng.randint(LONG_MIN, LONG_MAX) for _ in range(80)],
        "f": _floats(rng),
        "d": _doubles(rng),
        "str": _strings(rng),
        "bin": _binaries(rng),
    }
    return {name: _with_nulls(values, rng) for name, values in raw.items()}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    """Rows with an ``id`` and one value (or null) per typed column; short columns pad with null."""
    columns = _column_values()
    n = max(len(v) for v in columns.values())
    return [
        {"id": r, **{name: (values[r] if r < len(values) else None) for name, values in columns.items()}}
        for r in range(n)
    ]


@pytest.fixture(scope="module")
def frame(spark, rows):
    from pyspark.sql import types as T

    spark_types = {
        "boolean": T.BooleanType(), "byte": T.ByteType(), "short": T.ShortType(),
        "int": T.IntegerType(), "long": T.LongType(), "float": T.FloatType(),
        "double": T.DoubleType(), "string": T.StringType(), "binary": T.BinaryType(),
    }
    schema = T.StructType(
        [T.StructField("id", T.IntegerType(), False)]
        + [T.StructField(name, spark_types[type_name], True) for name, type_name in COLUMN_TYPES.items()]
    )
    data = [tuple(row[field.name] for field in schema.fields) for row in rows]
    return spark.createDataFrame(data, schema).cache()


def _expected_hash(row: dict[str, Any], cols: tuple[str, ...]) -> int:
    return spark_hash([row[c] for c in cols], [COLUMN_TYPES[c] for c in cols])


def test_spark_hash_matches_F_hash_for_every_type_and_combination(frame, rows) -> None:
    from pyspark.sql import functions as F

    single = [(c,) for c in COLUMN_TYPES]
    all_cols = single + COMBINATIONS
    aliases = [f"h{k}" for k in range(len(all_cols))]
    result = frame.select(
        "id", *[F.hash(*cols).alias(alias) for cols, alias in zip(all_cols, aliases)]
    ).collect()

    assert len(result) == len(rows)
    by_id = {r["id"]: r for r in result}
    mismatches = []
    for row in rows:
        spark_row = by_id[row["id"]]
        for cols, alias in zip(all_cols, aliases):
            expected = _expected_hash(row, cols)
            if spark_row[alias] != expected:
                mismatches.append((cols, [row[c] for c in cols], spark_row[alias], expected))
    assert mismatches == []
    # sanity: the data really contains nulls, -0.0 and NaN, and hashes are not all alike
    assert any(row["str"] is None for row in rows) and any(row["i"] is None for row in rows)
    assert any(row["d"] is not None and row["d"] != row["d"] for row in rows)
    assert len({spark_row["h0"] for spark_row in result}) == 3  # boolean: null, true, false
    assert len({spark_row[aliases[-1]] for spark_row in result}) > len(rows) * 0.9


@pytest.mark.parametrize("num_partitions", [3, 4, 7])
@pytest.mark.parametrize("cols", [("i",), ("str",), ("l", "str", "d", "bin", "b")])
def test_spark_partition_id_matches_repartition(
    frame, rows, num_partitions: int, cols: tuple[str, ...]
) -> None:
    from pyspark.sql import functions as F

    shuffled = frame.repartition(num_partitions, *cols)
    placed = shuffled.select("id", F.spark_partition_id().alias("pid")).collect()

    assert len(placed) == len(rows)
    actual = {r["id"]: r["pid"] for r in placed}
    expected = {row["id"]: spark_partition_id(_expected_hash(row, cols), num_partitions) for row in rows}
    assert actual == expected
    assert set(expected.values()) == set(range(num_partitions))  # every partition got rows


def test_spark_hash_matches_F_hash_for_dates_timestamps_and_decimals(spark) -> None:
    """The key types beyond the shuffle's: date, timestamp (aware, UTC), timestamp_ntz and
    decimals on both sides of 18 digits (hashLong of the unscaled value vs its bytes)."""
    import datetime as dt
    import decimal

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    utc = dt.timezone.utc
    rng = random.Random(7)
    dates = [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(1, 1, 1), dt.date(9999, 12, 31)]
    dates += [dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-200_000, 200_000)) for _ in range(20)]
    stamps = [dt.datetime(1970, 1, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999_999), dt.datetime(2024, 2, 29, 12)]
    stamps += [dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=rng.randint(-10**16, 10**16)) for _ in range(20)]
    small = [decimal.Decimal(0), decimal.Decimal("-1.25"), decimal.Decimal("99999999999999.9999")]
    small += [decimal.Decimal(rng.randint(-10**17, 10**17)).scaleb(-4) for _ in range(20)]
    big = [decimal.Decimal(0), decimal.Decimal("-1.5"), decimal.Decimal("9" * 28 + ".5"), decimal.Decimal(-(2**63))]
    big += [decimal.Decimal(rng.randint(-10**29, 10**29)).scaleb(-1) for _ in range(20)]
    n = max(map(len, (dates, stamps, small, big)))
    schema = T.StructType([T.StructField("id", T.IntegerType()), T.StructField("d", T.DateType()),
                           T.StructField("ts", T.TimestampType()), T.StructField("ntz", T.TimestampNTZType()),
                           T.StructField("small", T.DecimalType(18, 4)), T.StructField("big", T.DecimalType(30, 1))])
    rows = [(i, dates[i % len(dates)], stamps[i % len(stamps)].replace(tzinfo=utc), stamps[i % len(stamps)],
             small[i % len(small)], big[i % len(big)]) for i in range(n)] + [(n, None, None, None, None, None)]
    frame = spark.createDataFrame(rows, schema)
    types = {"d": "date", "ts": "timestamp", "ntz": "timestamp_ntz", "small": "decimal(18,4)", "big": "decimal(30,1)"}
    combos = [(c,) for c in types] + [tuple(types)]
    got = frame.select("id", *[F.hash(*c).alias(f"h{k}") for k, c in enumerate(combos)]).collect()
    by_id = {r[0]: r for r in rows}
    mismatches = [(c, r["id"]) for r in got for k, c in enumerate(combos)
                  if r[f"h{k}"] != spark_hash([by_id[r["id"]][1 + list(types).index(x)] for x in c], [types[x] for x in c])]
    assert len(got) == n + 1 and mismatches == []
