"""The engine room: the versioned store of one (operator, partition) and its parts.

``store.py`` holds :class:`~spark_state.engine.store.VersionedStore`, the facade; the modules
beside it are the parts it delegates to (see docs/internals.md for the list). Nothing here is
imported by this ``__init__`` so that importing one part does not import them all.
"""
