"""The wheel as users get it: built from the sources (``pip wheel``, as ``pip install .`` and
``./dev wheel`` build it), with a shim jar for every supported Spark line; pip's resolver keeps the
installed pyspark (and what it needs) when it installs the wheel; installed into a fresh virtualenv
and run from there -- a streaming aggregation on spark-state's provider -- with no compiler
(``javac`` and the Scala compiler refuse to run) and no writable home (so no jar cache either).
The compatibility suite runs the last two on every Spark line (``-m lines``), next to that line's
pyspark.

Lean on purpose: one build (the jars come from the jar cache when the sources are unchanged),
``pip install --no-deps --no-index`` of the wheel alone, and the dependencies (pyspark is ~450 MB)
taken from this test's own environment through a ``.pth`` file instead of being downloaded again.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
#: What a source distribution holds (MANIFEST.in): all a wheel is built from.
SOURCES = ["setup.py", "setup.cfg", "pyproject.toml", "README.md", "MANIFEST.in", "spark_state", "jvm-shim"]

#: ``java`` that runs Spark but refuses to compile: the shim's build runs the Scala compiler as
#: ``java ... scala.tools.nsc.Main``, and ``javac``.
FAKE_JAVA = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in scala.tools.nsc.*) echo "no compiler here: $*" >&2; exit 97 ;; esac
done
exec {java} "$@"
"""
FAKE_JAVAC = """#!/bin/sh
echo "no compiler here: javac $*" >&2
exit 97
"""

QUERY = textwrap.dedent(
    """
    import json, os, sys
    import spark_state
    from spark_state.spark import jvm
    from pyspark.sql import SparkSession, functions as F

    jar = jvm.jar_path()
    spark = (spark_state.configure(SparkSession.builder.master("local[2]").appName("wheel-test"))
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    input_dir, checkpoint = sys.argv[1], sys.argv[2]
    df = spark.readStream.schema("k bigint, v bigint").option("maxFilesPerTrigger", 1).json(input_dir)
    query = (df.groupBy("k").agg(F.sum("v").alias("total")).writeStream.format("memory").queryName("totals")
             .outputMode("complete").option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert query.awaitTermination(240)
    progress = [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]  # 3.5: dicts
    metrics = [op["customMetrics"] for p in progress for op in p["stateOperators"]]
    print(json.dumps({
        "spark_state": spark_state.__file__, "jar": jar, "spark_jars": spark.conf.get("spark.jars"),
        "totals": sorted([r.k, r.total] for r in spark.table("totals").collect()),
        "changelog_bytes": [m.get("sparkStateChangelogBytes", 0) for m in metrics],
    }))
    spark.stop()
    """
)


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{cmd} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    """The wheel built from a copy of the sources (the checkout stays untouched), and the build's output."""
    src = tmp_path_factory.mktemp("wheel-src")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.jar", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    # No build isolation (as ./dev builds): the build requirements, pyspark among them, are here.
    built = _run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", dist, src])
    (path,) = dist.glob("spark_state-*.whl")
    return path, built.stdout + built.stderr


def test_the_wheel_carries_a_jar_per_spark_line_and_spdx_license_metadata(wheel):
    from spark_state.spark import jvm, lines as spark_lines

    path, log = wheel
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        jars = {line.name: f"spark_state/{jvm.PACKAGED_JAR_DIR}/{line.jar_name}" for line in spark_lines.LINES}
        assert sorted(n for n in names if n.endswith(".jar")) == sorted(jars.values())
        running = spark_lines.running_line().name
        jar_bytes = zf.read(jars[running])
        for name, jar in jars.items():
            attributes = jvm.jar_manifest(io.BytesIO(zf.read(jar)))
            assert attributes[jvm.MANIFEST_SPARK_LINE] == name, attributes
            assert attributes[jvm.MANIFEST_SPARK_VERSION] == spark_lines.get_line(name).build_version
    assert not [n for n in names if n.startswith("jvm-shim/") or n.endswith(".scala")]
    # Developer tools (the doc generator) stay in the checkout; the demos ship (`spark-state demo`).
    assert not [n for n in names if n.startswith("tools/") or n.endswith("docgen.py")]
    assert "spark_state/demos/query.py" in names and "spark_state/spark/jvm.py" in names
    assert "License-Expression: Apache-2.0" in metadata
    assert "License :: " not in metadata  # no deprecated license classifier
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert not [r for r in requires if "==" in r and "extra ==" not in r], f"pinned dependencies: {requires}"
    assert "pyspark<4.4,>=3.5" in requires
    warnings = [line for line in log.splitlines() if "licen" in line.lower() and "warn" in line.lower()]
    assert "SetuptoolsDeprecationWarning" not in log and warnings == []
    # The running line's packaged jar is the one the sources compile to (the checkout's cached build).
    assert jar_bytes == Path(jvm.jar_path()).read_bytes()


@pytest.mark.lines
def test_installing_the_wheel_keeps_the_installed_pyspark(wheel):
    """pip's resolver, asked to install the wheel (with its dependencies) into this environment,
    keeps the pyspark here and every library it already has: ranges, not pins."""
    path, _ = wheel
    report = json.loads(_run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
                              path]).stdout)
    changed = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]}
    assert set(changed) <= {"spark-state"}, f"installing the wheel would install or change {changed}"


@pytest.mark.lines
def test_the_installed_wheel_runs_a_provider_query_without_compiler_or_writable_home(wheel, tmp_path):
    path, _ = wheel
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    _run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", path])
    # The dependencies come from this environment; appended after the venv's own site-packages,
    # and its .pth files (this checkout's editable install) are not processed.
    (purelib,) = [p for p in (env_dir / "lib").glob("python3*/site-packages")]
    (purelib / "zz-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    no_compiler = tmp_path / "jdk" / "bin"
    no_compiler.mkdir(parents=True)
    real_java = os.path.realpath(shutil.which("java") or "java")
    (no_compiler / "java").write_text(FAKE_JAVA.format(java=real_java))
    (no_compiler / "javac").write_text(FAKE_JAVAC)
    for tool in no_compiler.iterdir():
        tool.chmod(0o755)
    (tmp_path / "not-a-dir").write_text("")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_STATE_", "PYSPARK_", "SPARK_CONNECT", "SPARK_REMOTE", "VIRTUAL_ENV"))}
    env.update(HOME=str(tmp_path / "not-a-dir" / "home"), JAVA_HOME=str(no_compiler.parent),
               PATH=f"{no_compiler}:{env_dir / 'bin'}:{os.environ['PATH']}", PYTHONNOUSERSITE="1")

    # spark-state jar: the packaged jar of this pyspark's line, nothing compiled, nothing written;
    # --spark names another line's (a spark-submit whose driver has no pyspark).
    from spark_state.spark import lines as spark_lines

    printed = _run([env_dir / "bin" / "spark-state", "jar"], env=env, cwd=tmp_path).stdout.strip()
    assert Path(printed) == purelib / "spark_state" / "jars" / spark_lines.running_line().jar_name
    for line in spark_lines.LINES:
        other = _run([env_dir / "bin" / "spark-state", "jar", "--spark", line.build_version], env=env, cwd=tmp_path)
        assert Path(other.stdout.strip()) == purelib / "spark_state" / "jars" / line.jar_name

    input_dir = tmp_path / "input"
    input_dir.mkdir()
    batches = [[{"k": i % 5, "v": b * 10 + i} for i in range(20)] for b in range(3)]
    for b, rows in enumerate(batches):
        (input_dir / f"batch-{b}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(input_dir / f"batch-{b}.json", (1_700_000_000 + b, 1_700_000_000 + b))
    (tmp_path / "query.py").write_text(QUERY)
    out = _run([python, tmp_path / "query.py", input_dir, tmp_path / "ckpt"], env=env, cwd=tmp_path)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(result["spark_state"]).parent == purelib / "spark_state"  # the wheel, not this checkout
    assert result["jar"] == printed and printed in result["spark_jars"].split(",")
    expected: dict[int, int] = {}
    for rows in batches:
        for r in rows:
            expected[r["k"]] = expected.get(r["k"], 0) + r["v"]
    assert result["totals"] == sorted([k, v] for k, v in expected.items())
    assert len(result["changelog_bytes"]) == 3 and all(n > 0 for n in result["changelog_bytes"])  # our provider
    assert not (tmp_path / "not-a-dir").is_dir()
