"""Every stored key's bytes: the one place that builds and parses keys.

All integers are big-endian, so the bytes' order is the numeric order and one key range is
one scan. Values are not here (value serializers: :mod:`spark_state.state.serializers`; the
TTL stamp in front of a value: :mod:`spark_state.ttl.codec`).

Keyspace plan (the first byte of a key says who owns it)::

    0x00..0x7F  key-group keys: [key group u16 < 32768][...]       keygroup_prefix.py
                  keyed state   [kg][len u8][name][len u32][key][suffix]   keyed.py
                  timers        [kg][0x02 0xFF 'T'][domain][ts u64][key]  timers.py
                  provider      [kg][hash i32][UnsafeRow]                 provider.py
    0x80..0xFD  unused
    0xFE        operator state of keyed functions: [0xFE][mode][len][name][...]   operator.py
                (a ``checkpointed_process`` store has no keyed state and omits the 0xFE)
    0xFF        the engine's system keyspace: [0xFF][tag][...]                    system.py
                  0x01 TTL expiry index, 0x02 TTL format marker,
                  0x03 keyed schema record, 0x04 operator schema record

Invariants: a key group's keys are one contiguous range (rescale copies ranges); no data key
starts with 0xFE or 0xFF, so key counts and the provider's scans can stop below them
(:data:`~.keygroup_prefix.KEY_GROUP_KEYSPACE_END`, :data:`~.system.SYSTEM_PREFIX`). The JVM
shim builds the provider's keys and skips the system keyspace; the constants it repeats are
checked against these modules by ``tests/unit/test_keys_scala.py``.

Modules: :mod:`.keygroup_prefix` (the 2-byte prefix and key-group bounds), :mod:`.keyed`,
:mod:`.timers`, :mod:`.operator`, :mod:`.system`, :mod:`.provider` (imports numpy and
pyarrow, so it is not imported here).
"""
