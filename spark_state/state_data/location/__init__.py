"""What a path given to the state-as-data tools holds: a checkpoint or a savepoint
(:mod:`.savepoints`), a keyed or checkpointed function's state location in it (:mod:`.functions`),
and the schema records of its states (:mod:`.records`).
"""
