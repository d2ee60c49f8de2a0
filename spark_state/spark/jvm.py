"""Build and locate the JVM shim jar (the Scala ``StateStoreProvider`` of spark-state).

One jar per Spark line (:mod:`spark_state.spark.lines`): the provider contract differs between
lines, so each line's jar is compiled from ``jvm-shim/src/main`` plus the line's own source
folders, against that line's jars. Two places hold a jar:

* **Packaged** (an install from a wheel or ``pip install .``): the wheel build compiles the
  shim for every line and ships the jars as package data,
  ``spark_state/jars/spark-state-shim-spark<line>.jar`` (see ``setup.py``). A jar's manifest
  records the line, the pyspark version it was compiled against, its Scala compiler and the
  source key (below). :func:`jar_path` returns the running line's jar (or another line's, for a
  ``spark-submit`` whose driver has no pyspark), running no tool and writing nothing -- in a
  source checkout only while the sources still hash to its key.
* **Cached** (a source checkout, ``pip install -e .``): compiled on first use with the Scala
  compiler that ships inside the line's own jars (Maven and sbt are not needed, and the
  compiler always matches the Scala version Spark was built with): the installed pyspark's for
  its line, jars fetched once into the cache for another (finding and fetching Spark's jars is
  :mod:`spark_state.spark.spark_jars`'s part). The jar is never committed to the repository:
  it is a cache entry derived from the sources.

Cache layout::

    $SPARK_STATE_CACHE_DIR (default ~/.cache/spark-state)/
      jars/
        <pyspark version>-<key>/spark-state-shim.jar   # a finished jar, never modified
        <pyspark version>-<key>.lock                   # flock target of that entry's builders
        .build-<random>/                               # a build in progress (or a crashed one)
      spark-jars/<pyspark version>/jars/               # another line's jars, fetched for a build

``<key>`` is the first 16 hex digits of a SHA-256 over the sorted relative paths and the
contents of every source file of the line (common and the line's folders), the file name of
the Scala compiler jar and :data:`_BUILD_RECIPE`. Any edit of a source therefore yields a new
entry; old entries are left alone (other processes may still have them on their class path).

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

Source layout (under ``jvm-shim/src``): ``.scala`` files anywhere below ``main`` and below the
line's folders (``spark-4.x``, ``spark-4.3``, ...); ``.java`` files are supported too (scalac
reads them to resolve mixed references, then ``javac`` compiles them against scalac's output);
files under ``main/resources`` are copied into the jar verbatim (e.g. ``META-INF/services``
entries). Files whose name starts with ``.`` are ignored (editor lock and swap files).

Size: one module on purpose (over 500 lines). Locating, caching, building and packaging the shim
jar share one invariant -- a jar at its final path is complete and matches its source key -- and
one set of private build steps (``_run``, ``_build``, ``_source_dir_if_present``) that the
tests replace in this one namespace. Split, the invariant would span modules.
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
from typing import IO, Optional, Sequence

from ..errors import ConfigError
from .lines import LINES, SparkLine, get_line, running_line
from .spark_jars import cache_dir, installed_line, pyspark_jars_dir, pyspark_version, scala_jars, spark_jars_dir

__all__ = [
    "PROVIDER_CLASS",
    "PLUGIN_CLASS",
    "EXTENSIONS_CLASS",
    "TICK_SOURCE_CLASS",
    "JAR_NAME",
    "ShimBuildError",
    "shim_source_dir",
    "jar_path",
    "packaged_jar",
    "packaged_jar_dir",
    "packaged_jar_name",
    "build_packaged_jar",
    "jar_manifest",
]

log = logging.getLogger(__name__)

#: The class Spark must load as ``spark.sql.streaming.stateStore.providerClass``.
PROVIDER_CLASS = "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider"

#: spark-state's Spark plugin (``spark.plugins``): starts each executor's Python workers when the
#: executor starts (``SparkStatePlugin.scala``; ``prestartWorkers=false`` turns that off).
PLUGIN_CLASS = "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStatePlugin"

#: spark-state's session extensions (``spark.sql.extensions``, ``FunctionMetrics.scala``): each keyed
#: or checkpointed function appears in the Spark UI's SQL tab with its state figures as SQL metrics.
EXTENSIONS_CLASS = "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateExtensions"

#: spark-state's tick source (``TickSource.scala``), unioned into every keyed or checkpointed
#: function's input: it places the checkpoint and runs batches for due timers
#: (:mod:`spark_state.process.ticks`).
TICK_SOURCE_CLASS = "org.apache.spark.sql.execution.streaming.state.sparkstate.TickSource"

#: File name of the shim jar inside its cache entry.
JAR_NAME = "spark-state-shim.jar"

#: Directory, inside the ``spark_state`` package, of the jar a wheel ships.
PACKAGED_JAR_DIR = "jars"

#: Main attributes of every jar's manifest: the Spark line, the pyspark version whose jars it was
#: compiled against, the Scala compiler jar and the source key (the ``<key>`` of a cache entry).
MANIFEST_SPARK_LINE = "Spark-Line"
MANIFEST_SPARK_VERSION = "Spark-Version"
MANIFEST_SCALA_COMPILER = "Scala-Compiler"
MANIFEST_SOURCE_KEY = "Spark-State-Shim-Key"

#: Part of the cache key: bump it when the way a jar is built changes (compiler flags,
#: jar layout), so that jars built the old way are not reused.
_BUILD_RECIPE = "3"  # 3: one jar per Spark line, common sources plus the line's folders

#: How much of the compiler's output an error message carries (the tail holds the summary
#: line, and the first errors are usually near it for a small shim).
_OUTPUT_TAIL_CHARS = 4000

#: Upper bound of one compiler run; a small shim compiles in ~5-10 s, this only guards
#: against a wedged JVM holding the build lock forever.
_COMPILE_TIMEOUT_S = 900

_SOURCE_SUFFIXES = (".scala", ".java")
#: The folder of sources common to every line, and its resources (copied into the jar verbatim).
_COMMON_DIR = "main"
_RESOURCES_DIR = "main/resources"


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
    """The ``jvm-shim/src`` directory of the source checkout spark-state runs from (``main``
    and the line folders below it).

    Raises :class:`ConfigError` when it is absent (spark-state installed from a wheel,
    which carries the compiled jar instead): the jar is compiled from these sources.
    """
    path = _source_dir_if_present()
    if path is None:
        raise ConfigError(
            f"the spark-state JVM shim sources are needed to build its jar, but "
            f"{_expected_source_dir()} does not exist; install spark-state from a source "
            "checkout (pip install -e .), or from a wheel built for the installed pyspark "
            "(pip install .), which carries the jar"
        )
    return path


def _package_dir() -> Path:
    """The installed ``spark_state`` package directory (this module is ``spark_state/spark/jvm.py``)."""
    return Path(__file__).resolve().parent.parent


def _expected_source_dir() -> Path:
    return _package_dir().parent / "jvm-shim" / "src"


def _source_dir_if_present() -> Optional[Path]:
    path = _expected_source_dir()
    return path if path.is_dir() else None


# --- sources and cache key ----------------------------------------------------------------


def _input_files(source_dir: Path, line: SparkLine) -> list[str]:
    """Relative POSIX paths (under ``jvm-shim/src``), sorted, of every file that goes into the
    line's jar: the common folder's and the line's folders'."""
    inputs = []
    for folder in (_COMMON_DIR, *line.source_folders):
        base = source_dir / folder
        for path in base.rglob("*"):
            rel = path.relative_to(source_dir)
            if any(part.startswith(".") for part in rel.parts) or not path.is_file():
                continue
            if rel.as_posix().startswith(_RESOURCES_DIR + "/") or path.suffix in _SOURCE_SUFFIXES:
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


def jar_path(build: bool = True, line: Optional[str] = None) -> str:
    """Absolute path of the shim jar for a Spark line (default: the installed pyspark's) and the
    current sources.

    The packaged jar (see :func:`packaged_jar`) when it fits: no tool runs and nothing is
    written, so this works with a read-only home and without a compiler. Otherwise the
    cached jar compiled from the sources: with ``build`` (the default) it is compiled first
    if the cache does not hold it yet (about 10 s, once per source change; for another line
    than the installed pyspark's, its jars are fetched once, see
    :func:`~spark_state.spark.spark_jars.spark_jars_dir`); with ``build=False`` its path is
    returned whether or not it exists.

    Raises :class:`ConfigError` when neither fits (e.g. an installation without sources that has
    no jar for the line), for a version of no supported line, when the sources, Java or the
    Scala compiler are missing, and :class:`ShimBuildError` (a ``ConfigError``) with the
    compiler's output when the sources do not compile.
    """
    target = running_line() if line is None else get_line(line)
    packaged, mismatch = _packaged_jar(target)
    if packaged is not None:
        return str(packaged)
    try:
        source_dir = shim_source_dir()
    except ConfigError as exc:
        if mismatch:
            raise ConfigError(f"{mismatch}; no shim jar can be built either: {exc}") from None
        raise
    return str(_cached_jar(source_dir, cache_dir() / "jars", build, target))


def _cached_jar(source_dir: Path, jars_root: Path, build: bool, line: SparkLine) -> Path:
    """The cache entry's jar for the line's sources in ``source_dir``; built first unless present
    (and ``build``)."""
    jars_dir = spark_jars_dir(line, fetch=build)
    compiler_jar = scala_jars(jars_dir)[0]
    version = _jars_version(jars_dir, line)
    for _ in range(_MAX_BUILD_ATTEMPTS):
        inputs, entry = _entry(source_dir, line, compiler_jar, version)
        target = jars_root / entry / JAR_NAME
        if not build or target.is_file():
            return target
        if _build_entry(source_dir, line, inputs, jars_dir, jars_root, entry, compiler_jar, version):
            return target
        # The sources were edited while they compiled: the jar might mix two states of
        # them, so it was discarded; build again from the sources as they are now.
        log.info("spark-state shim sources changed during the build; building again")
    raise ConfigError(
        f"the spark-state shim sources under {source_dir} kept changing while they were "
        f"compiled ({_MAX_BUILD_ATTEMPTS} attempts); retry once they are saved"
    )


def _jars_version(jars_dir: Path, line: SparkLine) -> str:
    """The pyspark version of a line's jars: the installed pyspark's, else the line's build version."""
    if installed_line() == line and jars_dir == pyspark_jars_dir():
        return pyspark_version()
    return line.build_version


# --- the packaged jars (wheels) -----------------------------------------------------------


def packaged_jar_name(line: str) -> str:
    """File name of the jar a wheel ships for a Spark line (``3.5``; a version of it will do)."""
    return get_line(line).jar_name


def packaged_jar_dir() -> Path:
    """``spark_state/jars`` of the installed package (present in installs from a wheel)."""
    return _package_dir() / PACKAGED_JAR_DIR


def packaged_jar(line: Optional[str] = None) -> Optional[Path]:
    """The jar shipped inside this installation for a line (default: the installed pyspark's), if
    it fits; else None.

    It fits when its manifest names the line and -- where the shim sources are present (a source
    checkout) -- it was built from sources that hash to the key in its manifest. A checkout whose
    sources were edited since therefore builds from them.
    """
    return _packaged_jar(running_line() if line is None else get_line(line))[0]


def _packaged_jar(line: SparkLine) -> tuple[Optional[Path], str]:
    """``(jar, "")`` when the packaged jar of ``line`` fits; ``(None, why)`` when the installation
    ships jars but none that fits (``why`` is the reason, for an error message); ``(None, "")``
    when it ships none or the sources differ from the ones it was built from."""
    directory = packaged_jar_dir()
    shipped = sorted(directory.glob("spark-state-shim-*.jar")) if directory.is_dir() else []
    if not shipped:
        return None, ""
    jar = directory / line.jar_name
    if not jar.is_file():
        return None, (
            f"spark-state's installation ships JVM shim jars ({', '.join(p.name for p in shipped)}) but none for "
            f"Spark {line.name}; reinstall spark-state (a wheel carries one jar per supported Spark line)"
        )
    manifest = jar_manifest(jar)
    if manifest.get(MANIFEST_SPARK_LINE) != line.name or not manifest.get(MANIFEST_SOURCE_KEY):
        return None, (
            f"spark-state's packaged JVM shim jar {jar} does not say it was built for Spark {line.name} "
            f"(its manifest: {MANIFEST_SPARK_LINE}={manifest.get(MANIFEST_SPARK_LINE)!r}); reinstall spark-state"
        )
    source_dir = _source_dir_if_present()
    if source_dir is not None:
        compiler = manifest.get(MANIFEST_SCALA_COMPILER, "")
        inputs = _input_files(source_dir, line)
        if _cache_key(source_dir, inputs, Path(compiler)) != manifest[MANIFEST_SOURCE_KEY]:
            log.debug("packaged shim jar %s is older than the sources in %s; using the cache", jar, source_dir)
            return None, ""
    return jar, ""


def jar_manifest(jar: "os.PathLike[str] | str | IO[bytes]") -> dict[str, str]:
    """The main attributes of a jar's ``META-INF/MANIFEST.MF`` (empty if it has none); ``jar`` is a path or
    a binary file."""
    try:
        with zipfile.ZipFile(jar) as zf:
            text = zf.read("META-INF/MANIFEST.MF").decode("utf-8")
    except KeyError:
        return {}
    attributes: dict[str, str] = {}
    last = None
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line:
            break  # the main section ends at the first blank line
        if line.startswith(" ") and last:  # a continuation line (72-byte wrapping)
            attributes[last] += line[1:]
        elif ":" in line:
            last, _, value = line.partition(":")
            attributes[last] = value.strip()
    return attributes


def build_packaged_jar(dest_dir: "os.PathLike[str] | str", lines: Optional[Sequence[str]] = None,
                       fetch: bool = True) -> list[Path]:
    """Compile the shim for each of ``lines`` (default: every supported line) into ``dest_dir`` as
    :func:`packaged_jar_name` (the wheel build step; see ``setup.py``). Returns their paths.

    A line's jars are the installed pyspark's for its line, else fetched once into the cache
    (``fetch``; see :func:`~spark_state.spark.spark_jars.spark_jars_dir`). Goes through the cache (equal sources give a
    byte-identical jar, so a jar compiled for the tests is reused), or a private temporary cache
    when the cache directory cannot be written (a build sandbox without a home).
    """
    source_dir = shim_source_dir()
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob("spark-state-shim-*.jar"):
        stale.unlink()
    chosen = [get_line(name) for name in lines] if lines is not None else list(LINES)
    jars_root = cache_dir() / "jars"
    try:
        jars_root.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=jars_root).close()
        writable = True
    except OSError as exc:
        log.info("spark-state cache not writable (%s); building the shim jars in a temporary directory", exc)
        writable = False
    built = []
    with tempfile.TemporaryDirectory(prefix="spark-state-build-") as tmp:
        for line in chosen:
            spark_jars_dir(line, fetch=fetch)  # fetched before the build, outside the entry's lock
            root = jars_root if writable else Path(tmp) / "jars"
            target = dest / line.jar_name
            shutil.copyfile(_cached_jar(source_dir, root, True, line), target)
            built.append(target)
    return built


#: Builds started by one jar_path() call before it gives up on sources that keep changing.
_MAX_BUILD_ATTEMPTS = 3


def _entry(source_dir: Path, line: SparkLine, compiler_jar: Path, version: str) -> tuple[list[str], str]:
    """The input files and the cache entry name (``<pyspark version>-<key>``)."""
    inputs = _input_files(source_dir, line)
    if not any(rel.endswith(".scala") for rel in inputs):
        raise ConfigError(f"no .scala sources under {source_dir} for Spark {line.name}; the JVM shim is not "
                          "written yet")
    return inputs, f"{version}-{_cache_key(source_dir, inputs, compiler_jar)}"


def _build_entry(
    source_dir: Path, line: SparkLine, inputs: list[str], jars_dir: Path, jars_root: Path, entry: str,
    compiler_jar: Path, version: str,
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
            log.info("building spark-state shim jar for Spark %s (first use, ~10 s)… -> %s", line.name, target)
            work = Path(tempfile.mkdtemp(prefix=".build-", dir=jars_root))
            try:
                key = entry.rsplit("-", 1)[1]
                _build(source_dir, inputs, jars_dir, work,
                       {MANIFEST_SPARK_LINE: line.name, MANIFEST_SPARK_VERSION: version,
                        MANIFEST_SCALA_COMPILER: compiler_jar.name, MANIFEST_SOURCE_KEY: key})
                if _entry(source_dir, line, compiler_jar, version) != (inputs, entry):
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


def _build(
    source_dir: Path, inputs: Sequence[str], jars_dir: Path, work: Path, attributes: dict[str, str]
) -> None:
    """Compile ``inputs`` and package ``work/<JAR_NAME>`` (``attributes`` go into its manifest)."""
    java = _java_executable()
    compiler, library, reflect = scala_jars(jars_dir)
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
    prefix = _RESOURCES_DIR + "/"
    resources = {rel[len(prefix):]: source_dir / rel for rel in inputs if rel.startswith(prefix)}
    _write_jar(work / JAR_NAME, classes, resources, attributes)


def _quote_arg(arg: str) -> str:
    # scalac's @file splits on whitespace and honours double quotes.
    return f'"{arg}"' if any(c.isspace() for c in arg) else arg


#: A fixed timestamp for every jar entry, so that equal inputs give byte-identical jars.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def _write_jar(jar: Path, classes: Path, resources: dict[str, Path], attributes: dict[str, str]) -> None:
    """Package ``classes`` and ``resources`` (jar path -> file) as a jar whose manifest carries
    ``attributes`` too; fsync it."""
    from ..version import __version__

    manifest = (
        "Manifest-Version: 1.0\r\n"
        f"Created-By: spark-state {__version__}\r\n"
        f"Implementation-Title: spark-state-shim\r\n"
        f"Implementation-Version: {__version__}\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in attributes.items())
        + "\r\n"
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
