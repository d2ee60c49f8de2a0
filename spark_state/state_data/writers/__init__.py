"""Writers of state as data: savepoints made by DataFrame jobs (:mod:`.bootstrap` from history,
:mod:`.transform` from a savepoint, with the rows checked first by :mod:`.transform_checks`), the
surgery each kind of state needs (:mod:`.keyed_state_surgery`, :mod:`.operator_state_surgery`,
:mod:`.spark_operator_surgery`), and the erasure of keys from a stopped query (:mod:`.erase`).
"""
