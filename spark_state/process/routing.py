"""Routing rows so that every partition owns whole, contiguous key groups (driver side).

For parallelism ``n`` and max parallelism ``maxP`` (the number of key groups):

* key group ``kg = pmod(hash(key columns), maxP)`` -- Spark's Murmur3 ``hash()``, computed in
  Spark SQL and shipped to the function as a hidden column;
* target partition ``t = kg * n // maxP`` -- Flink's operator index, so partition ``i`` owns
  the contiguous range :func:`~spark_state.partitioning.keygroups.compute_key_group_range_for_operator_index`;
* route value ``r_t``: a small int with ``pmod(murmur3(r_t, seed 42), n) == t``, found in
  Python with :func:`~spark_state.partitioning.spark_hash.spark_hash`. ``repartition(n, route)`` hashes the
  route column exactly that way, so row -> partition ``t``.
"""

from __future__ import annotations

from functools import lru_cache

from ..partitioning.spark_hash import spark_hash
from .errors import ProcessDefinitionError

KEY_GROUP_COLUMN = "__spark_state_key_group"
ROUTE_COLUMN = "__spark_state_route"
#: Which input a row comes from when several are unioned (see :mod:`.inputs`).
SIDE_COLUMN = "__spark_state_side"
HIDDEN_COLUMNS = (KEY_GROUP_COLUMN, ROUTE_COLUMN, SIDE_COLUMN)
#: The key group of rows that belong to no key (broadcast rows, ticks).
NO_KEY_GROUP = -1


@lru_cache(maxsize=64)
def route_values(parallelism: int) -> tuple[int, ...]:
    """``r[t]`` = the smallest int >= 0 whose Spark hash lands in partition ``t`` of ``parallelism``."""
    found: dict[int, int] = {}
    r = 0
    while len(found) < parallelism:
        t = spark_hash([r], ["int"]) % parallelism
        found.setdefault(t, r)
        r += 1
        if r > 1_000_000 + 100 * parallelism:  # pragma: no cover - Murmur3 covers every residue
            raise ProcessDefinitionError(f"no route values found for parallelism {parallelism}")
    return tuple(found[t] for t in range(parallelism))


def key_group_and_route(key_columns: list[str], parallelism: int, max_parallelism: int):
    """The (key group, route) columns of keyed rows."""
    from pyspark.sql import functions as F

    kg = F.pmod(F.hash(*[F.col(f"`{c}`") for c in key_columns]), F.lit(max_parallelism))
    target = F.floor(kg * F.lit(parallelism) / F.lit(max_parallelism)).cast("int")
    routes = F.array(*[F.lit(r) for r in route_values(parallelism)])
    route = F.element_at(routes, target + F.lit(1)).cast("int")
    return kg.cast("int"), route


def every_route(parallelism: int):
    """A generator column giving one row per partition's route (``explode``): broadcast rows."""
    from pyspark.sql import functions as F

    return F.explode(F.array(*[F.lit(r) for r in route_values(parallelism)]))


def first_route(parallelism: int):
    """The route of partition 0 (rows that only need to make a batch run: ticks)."""
    from pyspark.sql import functions as F

    return F.lit(route_values(parallelism)[0])


def repartition_routed(df, parallelism: int):
    """Repartition a DataFrame with a route column by it, then drop the route column."""
    from pyspark.sql import functions as F

    return df.repartition(parallelism, F.col(ROUTE_COLUMN)).drop(ROUTE_COLUMN)


def add_routing_columns(df, key_columns: list[str], parallelism: int, max_parallelism: int):
    """``df`` with the hidden key-group and route columns, repartitioned by the route, with
    the route column dropped again (the key group stays for the function)."""
    kg, route = key_group_and_route(key_columns, parallelism, max_parallelism)
    return repartition_routed(df.withColumn(KEY_GROUP_COLUMN, kg).withColumn(ROUTE_COLUMN, route), parallelism)
