"""The build step that puts the JVM shim jars into spark-state's wheel.

Metadata and dependencies live in setup.cfg; this file only adds to ``build_py``: a wheel
(``pip install .``, ``pip wheel .``, ``python -m build``) carries one jar per supported Spark line,
``spark_state/jars/spark-state-shim-spark<line>.jar`` (spark_state/spark/lines.py), each compiled
here with the Scala compiler inside that line's jars: the installed pyspark's for its own line, the
others' fetched once with pip into spark-state's cache (``~/.cache/spark-state/spark-jars``; pip's
own cache serves later builds). Editable installs (``pip install -e .``) compile nothing here: they
build the running line's jar into the cache on first use, from the sources they run (see
spark_state/spark/jvm.py).
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _jvm_module() -> types.ModuleType:
    """``spark_state.spark.jvm``, imported without running ``spark_state/__init__.py``, whose
    imports (pyarrow, rocksdict, ...) a build environment does not have. ``jvm`` itself needs
    only the standard library, ``spark_state.errors`` and ``spark_state.version``."""
    package_dir = ROOT / "spark_state"
    init = package_dir / "__init__.py"
    loaded = sys.modules.get("spark_state")
    if loaded is None or Path(getattr(loaded, "__file__", "")).resolve() != init:
        stub = types.ModuleType("spark_state")
        stub.__file__ = str(init)
        stub.__path__ = [str(package_dir)]  # submodules import from the checkout
        sys.modules["spark_state"] = stub
    return importlib.import_module("spark_state.spark.jvm")


class BuildPyWithShim(build_py):
    """``build_py`` that also compiles the shim jars into the build directory (not in editable
    mode, where the jar comes from the cache)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            self._shim_jars = self._build_shim()

    def _build_shim(self) -> list[Path]:
        jvm = _jvm_module()
        dest = Path(self.build_lib) / "spark_state" / jvm.PACKAGED_JAR_DIR
        print(f"building the spark-state JVM shim jars for every supported Spark line into {dest}", flush=True)
        return jvm.build_packaged_jar(dest)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        return outputs + [str(jar) for jar in getattr(self, "_shim_jars", [])]


setup(cmdclass={"build_py": BuildPyWithShim})
