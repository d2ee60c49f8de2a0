"""Which key group and which partition a key belongs to: pure hash and range math, no I/O.

* :mod:`.keygroups` -- Flink's key-group math (``assign_to_key_group``, operator ranges,
  default max parallelism), checked against Flink's own test vectors;
* :mod:`.spark_hash` -- Spark's shuffle hash (``Murmur3Hash``, seed 42), partition ids and
  the key group of a Spark-hashed key, checked against Spark itself;
* :mod:`.murmur3` -- the Murmur3 steps both are built from.

How a key group is written into a stored key is not here: :mod:`spark_state.keys` owns
every stored key's bytes.
"""
