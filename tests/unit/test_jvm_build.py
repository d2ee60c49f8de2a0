"""Building and caching the JVM shim jar (spark_state.spark.jvm), and the packaged jar a wheel
installs. ``configure()`` and the jar's command line are in ``test_configure``.

The build tests compile a tiny throwaway Scala tree, not the real shim: they exercise the
build machinery (cache key, lock, atomic publish, error reporting) independently of the
provider's sources. Tests that run the Scala compiler are marked ``spark`` (they need a JVM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path
from typing import Callable

import pytest

import spark_state
from spark_state.spark import jvm, lines as spark_lines, spark_jars
from spark_state.errors import ConfigError

HELLO = textwrap.dedent(
    """\
    package demo.hello

    object Hello {
      def greet(name: String): String = s"hello, $name"
    }
    """
)


@pytest.fixture
def shim_src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway shim source tree (``<tmp>/src``: its common folder ``main``, returned) and cache
    (``<tmp>/cache``) in use."""
    src = tmp_path / "src"
    (src / "main" / "scala" / "demo").mkdir(parents=True)
    (src / "main" / "scala" / "demo" / "Hello.scala").write_text(HELLO)
    monkeypatch.setattr(jvm, "shim_source_dir", lambda: src)
    monkeypatch.setattr(jvm, "_source_dir_if_present", lambda: src)
    monkeypatch.setenv(spark_jars.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return src / "main"


@pytest.fixture
def compiler_runs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Records every compiler command jvm runs (they still run)."""
    runs: list[list[str]] = []
    real_run: Callable[[list[str], str], None] = jvm._run

    def counting(cmd: list[str], what: str) -> None:
        runs.append(cmd)
        real_run(cmd, what)

    monkeypatch.setattr(jvm, "_run", counting)
    return runs


def _entries(jar: str) -> list[str]:
    with zipfile.ZipFile(jar) as zf:
        assert zf.testzip() is None
        return zf.namelist()


# --- pure: no compiler runs ---------------------------------------------------------------


def test_path_layout_without_building(shim_src: Path, tmp_path: Path) -> None:
    import pyspark

    path = Path(jvm.jar_path(build=False))
    assert path.is_absolute() and not path.exists()
    assert path.name == jvm.JAR_NAME
    assert path.parent.parent == (tmp_path / "cache" / "jars").resolve()
    version, key = path.parent.name.rsplit("-", 1)
    assert version == pyspark.__version__
    assert len(key) == 16 and int(key, 16) >= 0


def test_changed_source_gives_new_path(shim_src: Path) -> None:
    first = jvm.jar_path(build=False)
    assert jvm.jar_path(build=False) == first  # deterministic
    (shim_src / "scala" / "demo" / "Hello.scala").write_text(HELLO.replace("hello", "hi"))
    second = jvm.jar_path(build=False)
    assert second != first
    # A new file, and a renamed one, change the key too; editor dot-files do not.
    (shim_src / "scala" / "demo" / "More.scala").write_text("package demo.hello\nobject More\n")
    third = jvm.jar_path(build=False)
    assert third not in (first, second)
    (shim_src / "scala" / "demo" / ".#More.scala").write_text("lock file of an editor")
    (shim_src / "scala" / "demo" / "notes.txt").write_text("not a source")
    assert jvm.jar_path(build=False) == third
    (shim_src / "scala" / "demo" / "More.scala").rename(shim_src / "scala" / "demo" / "Most.scala")
    assert jvm.jar_path(build=False) != third


def test_missing_source_dir_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_pkg = tmp_path / "site-packages" / "spark_state"
    fake_pkg.mkdir(parents=True)
    monkeypatch.setattr(jvm, "_package_dir", lambda: fake_pkg)
    with pytest.raises(ConfigError, match=r"pip install -e \."):
        jvm.shim_source_dir()


def test_real_source_dir_is_located() -> None:
    # The checkout holds jvm-shim/src: main (every line) and each line's folders.
    expected = Path(spark_state.__file__).resolve().parent.parent / "jvm-shim" / "src"
    assert jvm.shim_source_dir() == expected
    for line in spark_lines.LINES:
        for folder in ("main", *line.source_folders):
            assert (expected / folder).is_dir(), f"{folder} of Spark {line.name}"


def test_each_line_compiles_its_own_folders_and_the_common_one(shim_src: Path) -> None:
    """A line's jar is built from main plus that line's folders only: a change in another line's
    folder leaves its key alone, a change in its own changes it."""
    root = shim_src.parent
    for folder in ("spark-3.5", "spark-4.x", "spark-4.3"):
        (root / folder).mkdir()
        (root / folder / "Line.scala").write_text(f"package demo.hello\nobject Line // {folder}\n")
    newest = spark_lines.NEWEST.name
    before = jvm.jar_path(build=False, line=newest)
    (root / "spark-3.5" / "Line.scala").write_text("package demo.hello\nobject Line // edited\n")
    assert jvm.jar_path(build=False, line=newest) == before
    (root / "spark-4.x" / "Line.scala").write_text("package demo.hello\nobject Line // edited\n")
    assert jvm.jar_path(build=False, line=newest) != before
    assert jvm._input_files(root, spark_lines.get_line("3.5")) == ["main/scala/demo/Hello.scala",
                                                                    "spark-3.5/Line.scala"]


def test_spark_lines_name_versions_and_refuse_unsupported_ones() -> None:
    assert [line.name for line in spark_lines.LINES] == ["3.5", "4.0", "4.1", "4.2", "4.3"]
    assert spark_lines.line_of("4.2.1").name == "4.2" and spark_lines.line_of("3.5").scala == "2.12"
    assert spark_lines.get_line("4.0").jar_name == "spark-state-shim-spark4.0.jar"
    for bad in ("3.4.4", "4.4.0", "5", "x"):
        with pytest.raises(ConfigError, match=r"not supported by spark-state: it runs on Spark 3.5, 4.0, 4.1, 4.2, 4.3"):
            spark_lines.line_of(bad)


def test_no_scala_sources_is_a_config_error(shim_src: Path) -> None:
    (shim_src / "scala" / "demo" / "Hello.scala").unlink()
    with pytest.raises(ConfigError, match="no .scala sources"):
        jvm.jar_path()


def test_no_java_is_a_config_error(
    shim_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ConfigError, match="Java 17"):
        jvm.jar_path()
    assert not Path(jvm.jar_path(build=False)).exists()
    # The failed build left no temporary directory behind.
    assert not list((tmp_path / "cache" / "jars").glob(".build-*"))


def test_sources_edited_during_a_build_are_rebuilt(shim_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A jar is never published under a key its sources no longer match."""
    builds: list[str] = []
    hello = shim_src / "scala" / "demo" / "Hello.scala"

    def fake_build(source_dir: Path, inputs: list[str], jars_dir: Path, work: Path, attributes: dict) -> None:
        builds.append(hello.read_text())
        if len(builds) == 1:
            hello.write_text(HELLO + "// saved again mid-build\n")
        with zipfile.ZipFile(work / jvm.JAR_NAME, "w") as zf:
            zf.writestr("built-from.txt", hello.read_text())

    monkeypatch.setattr(jvm, "_build", fake_build)
    stale = jvm.jar_path(build=False)
    path = jvm.jar_path()
    assert len(builds) == 2 and path != stale and not Path(stale).exists()
    assert path == jvm.jar_path(build=False)  # the key of the sources as they are now
    with zipfile.ZipFile(path) as zf:
        assert zf.read("built-from.txt").decode() == hello.read_text()


def test_pyspark_jars_dir_holds_the_scala_compiler() -> None:
    compiler, library, reflect = spark_jars.scala_jars(spark_jars.pyspark_jars_dir())
    assert compiler.name.startswith("scala-compiler-") and library.name.startswith("scala-library-")
    assert reflect.is_file()


# --- building (runs scalac: needs a JVM) --------------------------------------------------


@pytest.mark.spark
def test_first_call_builds_then_cache_hits(shim_src: Path, compiler_runs: list[list[str]]) -> None:
    (shim_src / "resources" / "META-INF" / "services").mkdir(parents=True)
    (shim_src / "resources" / "META-INF" / "services" / "demo.Service").write_text("demo.hello.Hello\n")

    path = jvm.jar_path()
    assert len(compiler_runs) == 1
    assert os.path.isabs(path) and Path(path).is_file()
    names = _entries(path)
    assert names[:2] == ["META-INF/", "META-INF/MANIFEST.MF"]
    assert "demo/hello/Hello.class" in names and "demo/hello/Hello$.class" in names
    assert "META-INF/services/demo.Service" in names
    with zipfile.ZipFile(path) as zf:
        assert zf.read("META-INF/MANIFEST.MF").startswith(b"Manifest-Version: 1.0\r\n")
    # No build leftovers next to the published jar.
    assert sorted(p.name for p in Path(path).parent.iterdir()) == [jvm.JAR_NAME]
    assert not list(Path(path).parent.parent.glob(".build-*"))

    mtime = os.stat(path).st_mtime_ns
    time.sleep(0.01)
    assert jvm.jar_path() == path  # cache hit: same path, no compiler run, file untouched
    assert len(compiler_runs) == 1
    assert os.stat(path).st_mtime_ns == mtime


@pytest.mark.spark
def test_built_jar_runs_on_the_jvm(shim_src: Path, tmp_path: Path) -> None:
    """The jar's classes load on Spark's class path (a JShell-free check: run a main)."""
    (shim_src / "scala" / "demo" / "Main.scala").write_text(
        "package demo.hello\nobject Main { def main(a: Array[String]): Unit = println(Hello.greet(\"jar\")) }\n"
    )
    path = jvm.jar_path()
    jars = spark_jars.pyspark_jars_dir()
    out = subprocess.run(
        ["java", "-cp", os.pathsep.join([path, str(jars / "*")]), "demo.hello.Main"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert out.stdout.strip() == "hello, jar"


@pytest.mark.spark
def test_compile_error_raises_with_compiler_output(shim_src: Path, tmp_path: Path) -> None:
    (shim_src / "scala" / "demo" / "Broken.scala").write_text(
        "package demo.hello\nobject Broken { val x: Int = undefinedThing }\n"
    )
    with pytest.raises(jvm.ShimBuildError) as info:
        jvm.jar_path()
    message = str(info.value)
    assert isinstance(info.value, ConfigError)
    assert "Broken.scala" in message and "undefinedThing" in message
    assert "undefinedThing" in info.value.output
    # Nothing was published, and the next call tries again (no negative caching).
    assert not Path(jvm.jar_path(build=False)).exists()
    assert not list((tmp_path / "cache" / "jars").glob(".build-*"))


@pytest.mark.spark
def test_mixed_scala_and_java_sources(shim_src: Path, compiler_runs: list[list[str]]) -> None:
    (shim_src / "java" / "demo").mkdir(parents=True)
    (shim_src / "java" / "demo" / "Greeter.java").write_text(
        "package demo.hello;\npublic final class Greeter {\n"
        "  public static String greet() { return Hello.greet(\"java\"); }\n}\n"
    )
    path = jvm.jar_path()
    assert len(compiler_runs) == 2  # scalac, then javac
    assert "javac" in Path(compiler_runs[1][0]).name
    names = _entries(path)
    assert "demo/hello/Greeter.class" in names and "demo/hello/Hello.class" in names


_WORKER = textwrap.dedent(
    """\
    import json, sys, time
    from pathlib import Path
    from spark_state.spark import jvm, lines as spark_lines

    src, go = Path(sys.argv[1]), Path(sys.argv[2])
    jvm.shim_source_dir = lambda: src
    jvm._source_dir_if_present = lambda: src
    runs = []
    real_run = jvm._run
    def counting(cmd, what):
        runs.append(what)
        real_run(cmd, what)
    jvm._run = counting
    while not go.exists():  # start both builds at the same moment
        time.sleep(0.01)
    print(json.dumps({"path": jvm.jar_path(), "runs": len(runs)}))
    """
)


@pytest.mark.spark
def test_concurrent_builds_from_two_processes_produce_one_jar(shim_src: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = dict(os.environ)  # carries SPARK_STATE_CACHE_DIR set by the fixture
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(shim_src.parent), str(go)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        for _ in range(2)
    ]
    time.sleep(0.5)
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0]["path"] == results[1]["path"]
    assert sorted(r["runs"] for r in results) == [0, 1]  # one compiled, the other waited
    jars_root = tmp_path / "cache" / "jars"
    assert [p.name for p in jars_root.iterdir() if p.is_dir()] == [Path(results[0]["path"]).parent.name]
    assert "demo/hello/Hello.class" in _entries(results[0]["path"])


# --- the packaged jar (installs from a wheel) --------------------------------------------


def _fake_packaged_jar(directory: Path, line: str, key: str, extra: str = "", compiler: str = "") -> Path:
    """A jar as a wheel ships it: named for the Spark ``line``, its manifest naming the line, the
    line's pyspark version, the Scala compiler and the key."""
    directory.mkdir(parents=True, exist_ok=True)
    spark_line = spark_lines.get_line(line)
    jar = directory / spark_line.jar_name
    with zipfile.ZipFile(jar, "w") as zf:
        zf.writestr(
            "META-INF/MANIFEST.MF",
            f"Manifest-Version: 1.0\r\n{jvm.MANIFEST_SPARK_LINE}: {spark_line.name}\r\n"
            f"{jvm.MANIFEST_SPARK_VERSION}: {spark_line.build_version}\r\n"
            f"{jvm.MANIFEST_SCALA_COMPILER}: {compiler}\r\n"
            f"{jvm.MANIFEST_SOURCE_KEY}: {key}\r\n{extra}\r\nName: section\r\nIgnored: yes\r\n",
        )
        zf.writestr("demo/hello/Hello.class", b"not really")
    return jar


@pytest.fixture
def wheel_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """As installed from a wheel: no shim sources, a ``spark_state/jars`` directory (returned),
    and a cache directory nothing can be created in (it lies below a regular file)."""
    monkeypatch.setattr(jvm, "_source_dir_if_present", lambda: None)
    packaged = tmp_path / "site-packages" / "spark_state" / "jars"
    monkeypatch.setattr(jvm, "packaged_jar_dir", lambda: packaged)
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setenv(spark_jars.CACHE_DIR_ENV, str(tmp_path / "not-a-dir" / "cache"))
    return packaged


def test_packaged_jar_is_used_without_sources_compiler_or_cache(
    wheel_install: Path, compiler_runs: list[list[str]]
) -> None:
    jars = {line.name: _fake_packaged_jar(wheel_install, line.name, "0123456789abcdef") for line in spark_lines.LINES}
    running = spark_lines.running_line().name
    assert jvm.packaged_jar() == jars[running]
    assert jvm.jar_path() == str(jars[running]) and jvm.jar_path(build=False) == str(jars[running])
    for name, jar in jars.items():  # another line's jar, for a spark-submit whose driver has no pyspark
        assert jvm.jar_path(line=name) == str(jar) == jvm.jar_path(line=spark_lines.get_line(name).build_version)
    assert compiler_runs == []
    with pytest.raises(OSError):  # the cache really is unusable: jar_path never touched it
        Path(spark_jars.cache_dir()).mkdir(parents=True)


def test_an_installation_without_the_running_lines_jar_is_a_config_error(wheel_install: Path) -> None:
    other = next(line for line in spark_lines.LINES if line != spark_lines.running_line())
    _fake_packaged_jar(wheel_install, other.name, "0123456789abcdef")
    assert jvm.packaged_jar() is None
    with pytest.raises(ConfigError) as info:
        jvm.jar_path()
    message = str(info.value)
    assert other.jar_name in message and f"none for Spark {spark_lines.running_line().name}" in message
    assert "no shim jar can be built either" in message and "pip install -e ." in message
    with pytest.raises(ConfigError, match="Spark 3.4.1 is not supported"):
        jvm.jar_path(line="3.4.1")


def test_packaged_jar_whose_manifest_names_another_line_is_not_used(wheel_install: Path) -> None:
    running = spark_lines.running_line()
    jar = _fake_packaged_jar(wheel_install, running.name, "0123456789abcdef")
    with zipfile.ZipFile(jar, "w") as zf:  # right file name, wrong manifest
        zf.writestr("META-INF/MANIFEST.MF", f"Manifest-Version: 1.0\r\n{jvm.MANIFEST_SPARK_LINE}: 9.9\r\n\r\n")
    with pytest.raises(ConfigError, match=f"does not say it was built for Spark {running.name}"):
        jvm.jar_path()


def test_no_packaged_jar_and_no_sources_names_both_ways_to_install(wheel_install: Path) -> None:
    with pytest.raises(ConfigError, match=r"pip install -e \.\).*pip install \.\)"):
        jvm.jar_path()


def test_packaged_jar_is_used_in_a_checkout_only_while_the_sources_match(
    shim_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiler_runs: list[list[str]]
) -> None:
    packaged = tmp_path / "pkg" / "spark_state" / "jars"
    monkeypatch.setattr(jvm, "packaged_jar_dir", lambda: packaged)
    cached = jvm.jar_path(build=False)  # the cache entry of the sources as they are
    key = Path(cached).parent.name.rsplit("-", 1)[1]
    compiler = spark_jars.scala_jars(spark_jars.pyspark_jars_dir())[0].name
    jar = _fake_packaged_jar(packaged, spark_lines.running_line().name, key, compiler=compiler)
    assert jvm.jar_path() == str(jar) and compiler_runs == []
    # An edited source: the packaged jar is stale; the checkout's own build is used.
    (shim_src / "scala" / "demo" / "Hello.scala").write_text(HELLO.replace("hello", "hi"))
    assert jvm.packaged_jar() is None
    fresh = jvm.jar_path(build=False)
    assert fresh not in (str(jar), cached) and Path(fresh).parent.parent == Path(cached).parent.parent


def test_jar_manifest_reads_the_main_section_with_continuation_lines(tmp_path: Path) -> None:
    long_value = "x" * 100
    jar = _fake_packaged_jar(tmp_path, "4.3", "abc", extra=f"Long: {long_value[:60]}\r\n {long_value[60:]}\r\n")
    manifest = jvm.jar_manifest(jar)
    assert manifest[jvm.MANIFEST_SPARK_VERSION] == "4.3.0" and manifest[jvm.MANIFEST_SOURCE_KEY] == "abc"
    assert manifest[jvm.MANIFEST_SPARK_LINE] == "4.3"
    assert manifest["Long"] == long_value
    assert "Ignored" not in manifest  # a per-entry section, not the main one
    with zipfile.ZipFile(tmp_path / "bare.jar", "w") as zf:
        zf.writestr("a.class", b"")
    assert jvm.jar_manifest(tmp_path / "bare.jar") == {}


@pytest.mark.spark
def test_build_packaged_jar_compiles_for_the_installed_pyspark(
    shim_src: Path, tmp_path: Path, compiler_runs: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    running = spark_lines.running_line()
    dest = tmp_path / "build" / "lib" / "spark_state" / "jars"
    _fake_packaged_jar(dest, "3.5" if running.name != "3.5" else "4.0", "stale")  # left in the build dir
    [jar] = jvm.build_packaged_jar(dest, lines=[running.name])
    assert sorted(p.name for p in dest.iterdir()) == [running.jar_name] == [jar.name]
    assert "demo/hello/Hello.class" in _entries(str(jar))
    manifest = jvm.jar_manifest(jar)
    cached = jvm.jar_path(build=False)
    assert manifest[jvm.MANIFEST_SPARK_VERSION] == pyspark.__version__
    assert manifest[jvm.MANIFEST_SPARK_LINE] == running.name
    assert f"{pyspark.__version__}-{manifest[jvm.MANIFEST_SOURCE_KEY]}" == Path(cached).parent.name
    assert Path(cached).read_bytes() == jar.read_bytes()  # built through the cache
    assert len(compiler_runs) == 1
    # With a cache directory that cannot be created, the build goes to a temporary one.
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setenv(spark_jars.CACHE_DIR_ENV, str(tmp_path / "not-a-dir" / "cache"))
    [again] = jvm.build_packaged_jar(dest, lines=[running.name])
    assert again.read_bytes() == jar.read_bytes() == Path(cached).read_bytes()  # reproducible
    assert len(compiler_runs) == 2
