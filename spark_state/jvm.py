"""Build and locate the JVM shim jar (the Scala ``StateStoreProvider`` of spark-state).

The shim is compiled on first use with the Scala compiler that ships inside pyspark's
own jars (Maven and sbt are not needed, and the compiler always matches the Scala version
Spark was built with). The jar is never committed to the repository and never shipped in
a wheel: it is a cache entry derived from the sources.

Cache layout::

    $SPARK_STATE_CACHE_DIR (default ~/.cache/spark-state)/
      jars/
        <pyspark version>-<key>/spark-state-shim.jar   # a finished jar, never modified
        <pyspark version>-<key>.lock                   # flock target of that entry's builders
        .build-<random>/                               # a build in progress (or a crashed one)

``<key>`` is the first 16 hex digits of a SHA-256 over the sorted relative paths and the
contents of every source file, the file name of the Scala compiler jar and
:data:`_BUILD_RECIPE`. Any edit of a source therefore yields a new entry; old entries are
left alone (other processes may still have them on their class path).

Invariants:

* A jar at its final path is complete: it is written in a private ``.build-*`` directory
  on the same file system, fsync'ed and moved into place with an atomic ``os.replace``.
  Readers therefore look for the final path without taking any lock, and a present jar is
  never rebuilt.
* At most one process builds a given entry: builders hold an exclusive ``fcntl.flock`` on
  the entry's ``.lock`` file and check for the finished jar again after acquiring it, so
  a process that waited for another's build just returns that jar (pytest workers, or
  several drivers starting at once, compile only once).
* A jar's key matches the sources it was compiled from: the sources are hashed again
  after compiling, and if they were edited meanwhile the jar is discarded and the build
  repeated for the new key.

Source layout: ``.scala`` files anywhere below ``jvm-shim/src/main``; ``.java`` files are
supported too (scalac reads them to resolve mixed references, then ``javac`` compiles them
against scalac's output); files under ``jvm-shim/src/main/resources`` are copied into the
jar verbatim (e.g. ``META-INF/services`` entries). Files whose name starts with ``.`` are
ignored (editor lock and swap files).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Sequence

from .errors import ConfigError

__all__ = [
    "PROVIDER_CLASS",
    "JAR_NAME",
    "ShimBuildError",
    "shim_source_dir",
    "pyspark_jars_dir",
    "cache_dir",
    "jar_path",
]

log = logging.getLogger(__name__)

#: The class Spark must load as ``spark.sql.streaming.stateStore.providerClass``.
PROVIDER_CLASS = "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider"

#: File name of the shim jar inside its cache entry.
JAR_NAME = "spark-state-shim.jar"

#: Environment variable that overrides the cache root (default ``~/.cache/spark-state``).
CACHE_DIR_ENV = "SPARK_STATE_CACHE_DIR"

#: Part of the cache key: bump it when the way a jar is built changes (compiler flags,
#: jar layout), so that jars built the old way are not reused.
_BUILD_RECIPE = "1"

#: How much of the compiler's output an error message carries (the tail holds the summary
#: line, and the first errors are usually near it for a small shim).
_OUTPUT_TAIL_CHARS = 4000

#: Upper bound of one compiler run; a small shim compiles in ~5-10 s, this only guards
#: against a wedged JVM holding the build lock forever.
_COMPILE_TIMEOUT_S = 900

_SOURCE_SUFFIXES = (".scala", ".java")
_RESOURCES_DIR = "resources"


class ShimBuildError(ConfigError):
    """The shim sources did not compile (or could not be packaged).

    ``output`` holds the compiler's complete stdout and stderr; the message carries its
    last few thousand characters.
    """

    def __init__(self, message: str, output: str = "") -> None:
        self.output = output
        tail = output[-_OUTPUT_TAIL_CHARS:]
        if len(output) > len(tail):
            tail = "...\n" + tail
        super().__init__(message + (f"\ncompiler output:\n{tail}" if tail.strip() else ""))


# --- locations ----------------------------------------------------------------------------


def shim_source_dir() -> Path:
    """The ``jvm-shim/src/main`` directory of the source checkout spark-state runs from.

    Raises :class:`ConfigError` when it is absent (spark-state installed from a wheel):
    the jar is compiled from these sources on first use.
    """
    import spark_state

    path = Path(spark_state.__file__).resolve().parent.parent / "jvm-shim" / "src" / "main"
    if not path.is_dir():
        raise ConfigError(
            f"the spark-state JVM shim sources are needed to build its jar, but {path} does "
            "not exist; install spark-state from a source checkout (pip install -e .)"
        )
    return path


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


def _pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


def _scala_jars(jars_dir: Path) -> tuple[Path, Path, Path]:
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


# --- sources and cache key ----------------------------------------------------------------


def _input_files(source_dir: Path) -> list[str]:
    """Relative POSIX paths, sorted, of every file that goes into the jar."""
    inputs = []
    for path in source_dir.rglob("*"):
        rel = path.relative_to(source_dir)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        if rel.parts[0] == _RESOURCES_DIR or path.suffix in _SOURCE_SUFFIXES:
            inputs.append(rel.as_posix())
    return sorted(inputs)


def _cache_key(source_dir: Path, inputs: Sequence[str], compiler_jar: Path) -> str:
    digest = hashlib.sha256()
    # Length-prefix every field so that no two different inputs hash the same bytes.
    for rel in inputs:
        data = (source_dir / rel).read_bytes()
        digest.update(b"F%d:%s%d:" % (len(rel.encode()), rel.encode(), len(data)))
        digest.update(data)
    digest.update(b"C:" + compiler_jar.name.encode())
    digest.update(b"R:" + _BUILD_RECIPE.encode())
    return digest.hexdigest()[:16]


# --- the public entry point ---------------------------------------------------------------


def jar_path(build: bool = True) -> str:
    """Absolute path of the shim jar for the current sources and pyspark.

    With ``build`` (the default) the jar is compiled first if the cache does not hold it
    yet (about 10 s, once per source change); a cached jar is returned without running
    any tool. With ``build=False`` the path is returned whether or not the jar exists.

    Raises :class:`ConfigError` when the sources, Java or the Scala compiler are missing,
    and :class:`ShimBuildError` (a ``ConfigError``) with the compiler's output when the
    sources do not compile.
    """
    source_dir = shim_source_dir()
    jars_dir = pyspark_jars_dir()
    compiler_jar = _scala_jars(jars_dir)[0]
    jars_root = cache_dir() / "jars"
    for _ in range(_MAX_BUILD_ATTEMPTS):
        inputs, entry = _entry(source_dir, compiler_jar)
        target = jars_root / entry / JAR_NAME
        if not build or target.is_file():
            return str(target)
        if _build_entry(source_dir, inputs, jars_dir, jars_root, entry, compiler_jar):
            return str(target)
        # The sources were edited while they compiled: the jar might mix two states of
        # them, so it was discarded; build again from the sources as they are now.
        log.info("spark-state shim sources changed during the build; building again")
    raise ConfigError(
        f"the spark-state shim sources under {source_dir} kept changing while they were "
        f"compiled ({_MAX_BUILD_ATTEMPTS} attempts); retry once they are saved"
    )


#: Builds started by one jar_path() call before it gives up on sources that keep changing.
_MAX_BUILD_ATTEMPTS = 3


def _entry(source_dir: Path, compiler_jar: Path) -> tuple[list[str], str]:
    """The input files and the cache entry name (``<pyspark version>-<key>``)."""
    inputs = _input_files(source_dir)
    if not any(rel.endswith(".scala") for rel in inputs):
        raise ConfigError(f"no .scala sources under {source_dir}; the JVM shim is not written yet")
    return inputs, f"{_pyspark_version()}-{_cache_key(source_dir, inputs, compiler_jar)}"


def _build_entry(
    source_dir: Path, inputs: list[str], jars_dir: Path, jars_root: Path, entry: str, compiler_jar: Path
) -> bool:
    """Build and publish ``jars_root/entry/JAR_NAME`` unless present; under the entry's lock.

    Returns False (publishing nothing) when the sources no longer hash to ``entry`` after
    compiling, so that a jar never sits under a key its contents do not match.
    """
    target = jars_root / entry / JAR_NAME
    jars_root.mkdir(parents=True, exist_ok=True)
    with open(jars_root / f"{entry}.lock", "a+b") as lock_file:
        # Blocks while another process builds this entry; the OS releases the lock if that
        # process dies, so a crashed build cannot wedge later ones.
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            if target.is_file():  # built by the process we waited for
                return True
            log.info("building spark-state shim jar (first use, ~10 s)… -> %s", target)
            work = Path(tempfile.mkdtemp(prefix=".build-", dir=jars_root))
            try:
                _build(source_dir, inputs, jars_dir, work)
                if _entry(source_dir, compiler_jar) != (inputs, entry):
                    return False
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(work / JAR_NAME, target)  # atomic: readers see no jar or all of it
                _fsync_dir(target.parent)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            log.info("built spark-state shim jar %s", target)
            return True
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


# --- building -----------------------------------------------------------------------------


def _java_executable() -> str:
    """``$JAVA_HOME/bin/java`` if set (as Spark's launcher prefers), else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ConfigError(
            "no `java` on PATH (and JAVA_HOME is not set): install Java 17 (e.g. "
            "apt-get install openjdk-17-jdk-headless) to build the spark-state JVM shim and run Spark"
        )
    return found


def _javac_executable(java: str) -> str:
    # Prefer the javac of the same JDK as `java`, so both agree on the class file version.
    sibling = Path(os.path.realpath(java)).parent / "javac"
    if sibling.is_file():
        return str(sibling)
    found = shutil.which("javac")
    if not found:
        raise ConfigError(
            "the spark-state JVM shim has .java sources, which need `javac`: install a Java 17 "
            "JDK (not just a JRE)"
        )
    return found


def _run(cmd: list[str], what: str) -> None:
    """Run one compiler; raise :class:`ShimBuildError` with its output if it fails."""
    try:
        proc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # interleaved, as the compiler printed them
            timeout=_COMPILE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode("utf-8", "replace")
        raise ShimBuildError(f"{what} did not finish within {_COMPILE_TIMEOUT_S} s", output) from None
    output = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        raise ShimBuildError(
            f"{what} failed (exit code {proc.returncode}) compiling the spark-state JVM shim",
            output,
        )
    if output.strip():
        log.debug("%s output:\n%s", what, output)


def _build(source_dir: Path, inputs: Sequence[str], jars_dir: Path, work: Path) -> None:
    """Compile ``inputs`` and package ``work/<JAR_NAME>``."""
    java = _java_executable()
    compiler, library, reflect = _scala_jars(jars_dir)
    classes = work / "classes"
    classes.mkdir()
    scala_and_java = [str(source_dir / rel) for rel in inputs if rel.endswith(_SOURCE_SUFFIXES)]
    java_sources = [str(source_dir / rel) for rel in inputs if rel.endswith(".java")]
    spark_classpath = str(jars_dir / "*")  # scalac and javac expand the wildcard themselves
    # Arguments go through an @file: a long source list must not hit the OS's argv limit.
    argfile = work / "scalac.args"
    argfile.write_text(
        "\n".join(
            _quote_arg(a)
            for a in ["-encoding", "UTF-8", "-classpath", spark_classpath, "-d", str(classes), *scala_and_java]
        )
        + "\n",
        encoding="utf-8",
    )
    _run(
        [
            java,
            "-Xss8m",  # scalac recurses deeply on large expressions; the default stack is small
            "-cp",
            os.pathsep.join(map(str, (compiler, library, reflect))),
            "scala.tools.nsc.Main",
            f"@{argfile}",
        ],
        "scalac",
    )
    if java_sources:
        # scalac only parsed the .java files (for mixed references); javac emits their bytecode.
        _run(
            [
                _javac_executable(java),
                "-encoding",
                "UTF-8",
                "--release",
                "17",
                "-cp",
                os.pathsep.join([str(classes), spark_classpath]),
                "-d",
                str(classes),
                *java_sources,
            ],
            "javac",
        )
    resources = [rel for rel in inputs if rel.split("/", 1)[0] == _RESOURCES_DIR]
    _write_jar(work / JAR_NAME, classes, {rel.split("/", 1)[1]: source_dir / rel for rel in resources})


def _quote_arg(arg: str) -> str:
    # scalac's @file splits on whitespace and honours double quotes.
    return f'"{arg}"' if any(c.isspace() for c in arg) else arg


#: A fixed timestamp for every jar entry, so that equal inputs give byte-identical jars.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def _write_jar(jar: Path, classes: Path, resources: dict[str, Path]) -> None:
    """Package ``classes`` and ``resources`` (jar path -> file) as a jar; fsync it."""
    from . import __version__

    manifest = (
        "Manifest-Version: 1.0\r\n"
        f"Created-By: spark-state {__version__}\r\n"
        f"Implementation-Title: spark-state-shim\r\n"
        f"Implementation-Version: {__version__}\r\n"
        "\r\n"
    )
    entries: dict[str, Path] = {
        p.relative_to(classes).as_posix(): p for p in classes.rglob("*") if p.is_file()
    }
    if not any(name.endswith(".class") for name in entries):
        raise ShimBuildError(f"the compiler produced no class files from {classes}")
    entries.update(resources)
    entries.pop("META-INF/MANIFEST.MF", None)  # ours is authoritative
    with zipfile.ZipFile(jar, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        # java.util.jar.JarInputStream only finds the manifest as the first entries.
        zf.writestr(zipfile.ZipInfo("META-INF/", _ZIP_EPOCH), b"")
        zf.writestr(_zip_info("META-INF/MANIFEST.MF"), manifest)
        directories: set[str] = {"META-INF/"}
        for name in sorted(entries):
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                directory = "/".join(parts[:i]) + "/"
                if directory not in directories:
                    directories.add(directory)
                    zf.writestr(zipfile.ZipInfo(directory, _ZIP_EPOCH), b"")
            zf.writestr(_zip_info(name), entries[name].read_bytes())
    with open(jar, "rb") as fh:
        os.fsync(fh.fileno())


def _zip_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, _ZIP_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def _fsync_dir(path: Path) -> None:
    """Make a rename into ``path`` durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
