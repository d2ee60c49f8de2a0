"""The release of spark-state (``spark_state.__version__``), in a module that imports nothing, so
that any part of the package -- and ``setup.py`` -- can read it without loading the rest."""

__version__ = "0.1.0"
