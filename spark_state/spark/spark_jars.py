"""Find (and fetch) the jars of Spark that spark-state's JVM shim is compiled against.

:mod:`spark_state.spark.jvm` builds the shim jar of a Spark line against that line's own jars;
this module says where those are:

* the installed pyspark's (``pyspark/jars``, or ``$SPARK_HOME/jars`` for a pyspark without
  bundled jars) when pyspark is of that line (:func:`pyspark_jars_dir`);
* else ``<cache>/spark-jars/<build version>/jars``, downloaded once with pip
  (:func:`fetch_spark_jars`): the pyspark sdist or wheel of the line's build version, of which
  only the jars are kept.

The cache root (:func:`cache_dir`) is ``$SPARK_STATE_CACHE_DIR`` or ``~/.cache/spark-state``; it
also holds the built shim jars (``jars/``, see :mod:`spark_state.spark.jvm`).

Invariant: a ``spark-jars/<version>/jars`` directory is whole once it exists -- a fetch fills
a private ``.fetch-*`` directory and moves it into place with one atomic ``os.replace``, so
concurrent fetches of the same line need no lock and a reader never sees half the jars.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Optional

from ..errors import ConfigError
from .lines import SparkLine, running_line

__all__ = [
    "CACHE_DIR_ENV",
    "cache_dir",
    "fetch_spark_jars",
    "installed_line",
    "pyspark_jars_dir",
    "pyspark_version",
    "scala_jars",
    "spark_jars_dir",
]

log = logging.getLogger(__name__)

#: Environment variable that overrides the cache root (default ``~/.cache/spark-state``).
CACHE_DIR_ENV = "SPARK_STATE_CACHE_DIR"


def pyspark_jars_dir() -> Path:
    """The directory of the jars of the Spark that pyspark runs (``pyspark/jars``).

    Falls back to ``$SPARK_HOME/jars`` for a pyspark without bundled jars (the ``python/``
    directory of a Spark distribution).
    """
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - pyspark is a hard dependency
        raise ConfigError("pyspark is not installed; pip install pyspark") from exc
    candidates = [Path(pyspark.__file__).resolve().parent / "jars"]
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "jars")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise ConfigError(
        "cannot find Spark's jars (looked in " + ", ".join(map(str, candidates)) + "); "
        "reinstall pyspark or set SPARK_HOME to a Spark distribution"
    )


def cache_dir() -> Path:
    """Root of spark-state's cache: ``$SPARK_STATE_CACHE_DIR`` or ``~/.cache/spark-state``."""
    configured = os.environ.get(CACHE_DIR_ENV)
    root = Path(configured).expanduser() if configured else Path.home() / ".cache" / "spark-state"
    return root.resolve()


def pyspark_version() -> str:
    """The version of the installed pyspark."""
    import pyspark

    return pyspark.__version__


def spark_jars_dir(line: SparkLine, fetch: bool = False) -> Path:
    """The jars a line's shim jar is compiled against: the installed pyspark's when it is of that
    line, else ``<cache>/spark-jars/<build version>/jars`` (fetched first with ``fetch``).

    Raises :class:`ConfigError` when they are not there and ``fetch`` is off, naming how to get them.
    """
    if installed_line() == line:
        return pyspark_jars_dir()
    cached = cache_dir() / "spark-jars" / line.build_version / "jars"
    if cached.is_dir():
        return cached
    if fetch:
        return fetch_spark_jars(line, cached.parent)
    raise ConfigError(
        f"building spark-state's JVM shim for Spark {line.name} needs the jars of pyspark {line.build_version}, "
        f"which is not installed and not in {cached}; install spark-state from a wheel (it carries a jar for "
        f"every line), or fetch them once: python -c \"from spark_state.spark import lines, spark_jars; "
        f"spark_jars.fetch_spark_jars(lines.get_line('{line.name}'))\"")


def installed_line() -> Optional[SparkLine]:
    """The Spark line of the installed pyspark, or None when it is of no supported line."""
    try:
        return running_line()
    except ConfigError:
        return None


def fetch_spark_jars(line: SparkLine, dest: Optional[Path] = None) -> Path:
    """Download pyspark ``line.build_version`` with pip (its sdist or wheel, no dependencies) and
    keep only its jars, in ``dest/jars`` (default ``<cache>/spark-jars/<version>``). Returns that
    directory. Takes a minute on a first run (300-450 MB); pip's cache serves later ones."""
    import sys
    import tarfile

    dest = dest or cache_dir() / "spark-jars" / line.build_version
    target = dest / "jars"
    if target.is_dir():
        return target
    dest.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest))
    try:
        log.warning("fetching the jars of pyspark %s (for spark-state's Spark %s shim) with pip...",
                    line.build_version, line.name)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(work),
                               f"pyspark=={line.build_version}"], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, check=False)
        archives = list(work.glob(f"pyspark-{line.build_version}*"))
        if proc.returncode != 0 or not archives:
            raise ConfigError(f"pip could not download pyspark {line.build_version} (exit {proc.returncode}): "
                              f"{(proc.stderr or proc.stdout)[-2000:]}")
        jars = work / "jars"
        jars.mkdir()
        archive = archives[0]
        if archive.name.endswith(".whl"):
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    if name.startswith("pyspark/jars/") and name.endswith(".jar"):
                        (jars / Path(name).name).write_bytes(zf.read(name))
        else:
            with tarfile.open(archive) as tf:
                for member in tf.getmembers():
                    parts = member.name.split("/")
                    if member.isfile() and member.name.endswith(".jar") and parts[-2:-1] == ["jars"] \
                            and ("deps" in parts or "pyspark" in parts):
                        source = tf.extractfile(member)
                        if source is not None:
                            (jars / parts[-1]).write_bytes(source.read())
        if not any(jars.glob("scala-compiler-*.jar")):
            raise ConfigError(f"{archive.name} holds no Spark jars with a Scala compiler")
        try:
            os.replace(jars, target)  # atomic: a concurrent fetch of the same line finds a whole directory
        except OSError:
            if not target.is_dir():
                raise
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def scala_jars(jars_dir: Path) -> tuple[Path, Path, Path]:
    """The compiler, library and reflect jars among Spark's jars (found by glob, so a
    Spark built with another Scala 2.13 patch release works unchanged)."""
    found = []
    for name in ("scala-compiler", "scala-library", "scala-reflect"):
        matches = sorted(jars_dir.glob(f"{name}-*.jar"))
        if not matches:
            raise ConfigError(
                f"no {name}-*.jar in {jars_dir}: this Spark distribution does not bundle the "
                "Scala compiler spark-state uses to build its JVM shim"
            )
        found.append(matches[-1])
    return found[0], found[1], found[2]
