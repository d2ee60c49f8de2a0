"""The docs name only repository paths that exist, and the README names every part of the package.

A backticked path in ``README.md`` or ``docs/*.md`` (``spark_state/ops/rescale.py``,
``bench/provider_bench.py --rounds 2``, ``tests/spark/test_provider.py::test_x``) is a promise
that the file is there; a file moved or renamed breaks it silently. Which inline-code words are
repository paths: those that contain a slash and either start with a top-level entry of the
repository (``spark_state/``, ``jvm-shim/``, ``tests/``, ...) or end in a source extension
(``.py``, ``.scala``, ``.ipynb``, ...). So checkpoint layouts (``manifests/<v>.json``), URLs and
module names (``spark_state.ops``) are not checked, and a path written relative to a package
(``engine/store.py``) is reported: write it from the repository's root. Placeholders are
patterns: ``<line>`` and ``*`` match any part of a name, ``...`` any folders between; ``::name``
after a test file is a test that must be defined there. Build and run outputs
(:data:`OUTPUTS`: git ignores them) are not in a checkout and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Source extensions: a word ending in one of these, with a slash, is a repository path.
EXTENSIONS = (".py", ".scala", ".ipynb", ".md", ".txt", ".toml", ".cfg", ".conf", ".sh")
#: Places a build or a run creates (in .gitignore): named in the docs, never in a checkout.
OUTPUTS = ("spark_state/jars/", "dist/", "build/", "bench/results/", "demo-checkpoint/", "demo-input/",
           ".venv/", ".venv-lines/")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
FENCED = re.compile(r"```.*?```", re.S)
#: Punctuation around a path inside inline code (``(see tools/docgen.py)``, ``a/b.py:``).
LEADING, TRAILING = "(['\"", ",;:)'\""


def _top_level() -> frozenset[str]:
    return frozenset(p.name for p in ROOT.iterdir() if p.name not in (".git", ".venv", ".venv-lines"))


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def repository_paths(markdown: str, top_level: frozenset[str]) -> list[str]:
    """The repository paths named in the page's inline code, in order (fenced blocks are examples
    and layouts, not references)."""
    found = []
    for code in INLINE_CODE.findall(FENCED.sub("", markdown)):
        for word in code.split():
            path = word.lstrip(LEADING).rstrip(TRAILING)
            if path.endswith("]") and "[" not in path:
                path = path.rstrip("]")
            if "/" not in path or "://" in path or path.startswith(("~", "/", "$")):
                continue
            if path.split("/", 1)[0] in top_level or path.split("::", 1)[0].endswith(EXTENSIONS):
                found.append(path)
    return found


def _pattern(path: str) -> str:
    """A glob of ``path``: ``<placeholder>`` -> ``*``, a ``...`` folder -> ``**``."""
    path = re.sub(r"<[^>/]*>", "*", path)
    return re.sub(r"(^|/)(\.\.\.|…)(/|$)", r"\1**\3", path)


def missing(path: str, root: Path = ROOT) -> bool:
    """Whether ``path`` (as :func:`repository_paths` gives it) names nothing in ``root``."""
    if path.startswith(OUTPUTS):
        return False
    file, _, test = path.partition("::")
    pattern = _pattern(file.rstrip("/"))
    matches = list(root.glob(pattern)) if any(c in pattern for c in "*?[") else [root / pattern]
    matches = [m for m in matches if m.exists()]
    if not matches:
        return True
    if test:
        name = test.split("[", 1)[0].split("::")[-1]
        return not any(re.search(rf"^\s*(async\s+)?def {re.escape(name)}\(", m.read_text(encoding="utf-8"), re.M)
                       for m in matches if m.is_file())
    return False


def test_every_backticked_repository_path_in_the_docs_exists():
    top = _top_level()
    checked = 0
    problems = {}
    for page in doc_pages():
        paths = repository_paths(page.read_text(encoding="utf-8"), top)
        checked += len(paths)
        if bad := sorted({p for p in paths if missing(p)}):
            problems[str(page.relative_to(ROOT))] = bad
    assert checked > 50, f"only {checked} repository paths found in the docs: is the pattern still right?"
    assert not problems, f"the docs name repository paths that do not exist: {problems}"


def test_the_path_check_sees_what_is_missing(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "mod.py").write_text("def test_here():\n    pass\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "spark-3.5.txt").write_text("")
    top = frozenset({"pkg", "tests"})
    page = ("`pkg/sub/mod.py` `python pkg/sub/gone.py --x 1` (`sub/mod.py`) `manifests/<v>.json` "
            "`spark_state.ops` `https://x.org/a.py` `tests/spark-<line>.txt` `pkg/.../mod.py` `pkg/sub/`\n"
            "`pkg/sub/mod.py::test_here` `pkg/sub/mod.py::test_gone[a-b]`\n```\n`pkg/fenced.py`\n```\n")
    paths = repository_paths(page, top)
    assert paths == ["pkg/sub/mod.py", "pkg/sub/gone.py", "sub/mod.py", "tests/spark-<line>.txt", "pkg/.../mod.py",
                     "pkg/sub/", "pkg/sub/mod.py::test_here", "pkg/sub/mod.py::test_gone[a-b]"]
    assert [p for p in paths if missing(p, tmp_path)] == ["pkg/sub/gone.py", "sub/mod.py",
                                                           "pkg/sub/mod.py::test_gone[a-b]"]


def test_the_readme_names_every_package_of_spark_state():
    """The README's "Status" lists the parts of the package: each package of spark_state/ is named
    there (as ``spark_state.<name>`` or ``<name>``)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    status = readme.split("**Status.**", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(?:spark_state\.)?([a-z_]+)`", status))
    packages = {p.parent.name for p in (ROOT / "spark_state").glob("*/__init__.py")}
    assert packages - named == set(), f"README.md's Status does not name these packages: {sorted(packages - named)}"
