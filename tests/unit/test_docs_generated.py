"""The generated reference pages in docs/ are what the code says today.

``docs/configuration.md`` is rendered from :mod:`spark_state.options`, ``docs/cli.md`` from
the command line's parsers and ``docs/compatibility.md`` from :mod:`spark_state.spark.lines`
(``tools/docgen.py``). A change to any of these sources without regenerating fails here, with the
command that fixes it.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest

import docgen

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _diff(name: str, want: str) -> str:
    have = (DOCS / name).read_text(encoding="utf-8") if (DOCS / name).is_file() else ""
    lines = difflib.unified_diff(have.splitlines(), want.splitlines(), f"docs/{name}", "generated", lineterm="", n=1)
    return "\n".join(list(lines)[:40])


def _check(name: str) -> None:
    want = docgen.PAGES[name]()
    path = DOCS / name
    assert path.is_file(), f"docs/{name} is missing; run {docgen.REGENERATE}"
    if path.read_text(encoding="utf-8") != want:
        pytest.fail(f"docs/{name} is stale: run {docgen.REGENERATE} and commit the result.\n{_diff(name, want)}",
                    pytrace=False)


def test_configuration_page_is_current():
    _check("configuration.md")


def test_cli_page_is_current():
    recorded = docgen.cli_python_version((DOCS / "cli.md").read_text(encoding="utf-8"))
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if recorded and recorded != running:
        pytest.skip(f"docs/cli.md was rendered by Python {recorded}; argparse lays help out differently in "
                    f"{running}")
    _check("cli.md")


def test_check_mode_reports_a_stale_page(tmp_path):
    for name, render in docgen.PAGES.items():
        (tmp_path / name).write_text(render(), encoding="utf-8")
    assert docgen.stale_pages(tmp_path) == []
    (tmp_path / "configuration.md").write_text("edited by hand\n", encoding="utf-8")
    assert docgen.stale_pages(tmp_path) == ["configuration.md"]
    assert docgen.main(["--check", "--docs-dir", str(tmp_path)]) == 1


def test_the_docs_index_names_exactly_the_generated_pages():
    """docs/README.md says which pages are generated and how many: exactly :data:`docgen.PAGES`."""
    import re

    index = (DOCS / "README.md").read_text(encoding="utf-8")
    section = index.split("## Generated pages", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"\[`([\w.-]+\.md)`\]", section))
    assert named == set(docgen.PAGES), f"docs/README.md's 'Generated pages' names {sorted(named)}"
    words = {1: "One", 2: "Two", 3: "Three", 4: "Four", 5: "Five"}
    assert section.lstrip().startswith(f"{words[len(docgen.PAGES)]} pages are generated"), section[:80]


def test_every_subcommand_has_a_section():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    for name in docgen.subcommands():
        assert f"## spark-state {name}\n" in page
        assert f"$ spark-state {name} --help" in page


def test_docs_links_resolve():
    """Relative links between the Markdown pages (README and docs/) point at files that exist, and
    their #anchors at headings of the target page (GitHub's slugs). Pages other branches add are
    allowed to be missing until they merge (listed in docs/README.md only)."""
    import re

    root = DOCS.parent
    pages = [root / "README.md"] + sorted(DOCS.glob("*.md"))
    link = re.compile(r"\]\(([^)\s]+)\)")
    problems = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in link.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                problems.append(f"{page.relative_to(root)}: {target} (no such file)")
                continue
            if anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
                problems.append(f"{page.relative_to(root)}: {target} (no such heading)")
    assert not problems, "broken links:\n" + "\n".join(problems)



def _anchors(markdown: str) -> set[str]:
    import re

    out = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        out.add(slug)
    return out


def test_compatibility_page_is_current():
    _check("compatibility.md")


def test_every_test_the_compatibility_page_names_runs_on_every_line():
    """A cell of docs/compatibility.md rests on its tests: each is in the compatibility suite (marked
    ``lines``), which ./dev test runs on every Spark line."""
    import subprocess

    from spark_state.spark.lines import COMPATIBILITY

    root = Path(__file__).resolve().parents[2]
    named = sorted({t for f in COMPATIBILITY for t in f.tests})
    files = sorted({t.split("::")[0] for t in named})
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "lines", "-p", "no:xdist",
                           "-p", "no:cacheprovider", *files], cwd=root, capture_output=True, text=True, timeout=300)
    collected = [line.split("[")[0] for line in proc.stdout.splitlines() if "::" in line]
    missing = [t for t in named if t not in collected]
    assert not missing, f"not in the compatibility suite (-m lines): {missing}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
