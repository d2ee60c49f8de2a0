"""Spark glue: everything that knows about a Spark installation, apart from the engine.

* :mod:`.lines` -- the supported Spark lines (pyspark version per line, what works on each);
* :mod:`.jvm` -- building, caching and locating the JVM shim jar of each line;
* :mod:`.session` -- :func:`configure` / :func:`server_confs`: the confs a session needs;
* :mod:`.connect` -- telling a Spark Connect client from a classic driver;
* :mod:`.compat` -- the pyspark calls whose form differs between lines.

This package imports nothing at load time: ``setup.py`` imports :mod:`.jvm` in a build
environment that has only the standard library.
"""
