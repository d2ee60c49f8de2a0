"""The docs stay true to the tree: every relative link of the Markdown pages points at a file that
exists, and the shim's README names every Scala source file and source folder there is (and no
file that is not)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "jvm-shim"
#: ``[text](target)``; images too. Targets with a scheme (https:, mailto:) are not files.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_pages() -> list[Path]:
    pages = [ROOT / "README.md", SHIM / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [p for p in pages if p.exists()]


def _without_code(text: str) -> str:
    """The page without fenced code blocks and inline code, where brackets are not links."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(_without_code(page.read_text(encoding="utf-8"))):
        path = target.split("#", 1)[0]
        if not path or SCHEME.match(path):
            continue
        if not (page.parent / path).exists():
            broken.append(target)
    return broken


def test_every_relative_link_of_the_docs_points_at_a_file():
    pages = markdown_pages()
    assert len(pages) > 10
    broken = {str(p.relative_to(ROOT)): links for p in pages if (links := broken_links(p))}
    assert not broken, f"links to files that do not exist: {broken}"


def test_the_link_check_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x")
    page.write_text("[a](there.md#part) [b](missing.md) [c](https://example.org/x.md) `[d](nope.md)`\n"
                    "```\n[e](nope.md)\n```\n")
    assert broken_links(page) == ["missing.md"]


def test_the_shim_readme_names_every_source_file_and_folder():
    readme = (SHIM / "README.md").read_text(encoding="utf-8")
    sources = sorted((SHIM / "src").rglob("*.scala"))
    assert sources
    common = SHIM / "src" / "main"
    missing = []
    for source in sources:
        if common in source.parents:
            if f"`{source.name}`" not in readme:
                missing.append(str(source.relative_to(SHIM)))
        else:
            folder = source.parent.name
            if f"`src/{folder}`" not in readme:
                missing.append(f"src/{folder}/")
            # a line folder's own classes are named; the three names every line defines are named once
            if f"`{source.stem}`" not in readme:
                missing.append(str(source.relative_to(SHIM)))
    assert not missing, f"jvm-shim/README.md does not name: {sorted(set(missing))}"
    named = set(re.findall(r"`([A-Za-z0-9]+\.scala)`", readme))
    existing = {s.name for s in sources}
    assert named <= existing, f"jvm-shim/README.md names files that do not exist: {sorted(named - existing)}"


#: An issue number ("issue 14", "#24") or a commit hash (7-40 hex digits with a letter and a digit).
HISTORY_REFERENCE = re.compile(
    r"\bissues? #?\d+\b|(?<![\w-])#\d+\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", re.I)


def history_references(text: str) -> list[str]:
    return [m.group(0) for m in HISTORY_REFERENCE.finditer(_without_code(text))]


def test_the_docs_state_facts_without_issue_numbers_or_commit_hashes():
    found = {str(p.relative_to(ROOT)): refs for p in markdown_pages()
             if (refs := history_references(p.read_text(encoding="utf-8")))}
    assert not found, f"issue numbers or commit hashes in the docs (history lives in git): {found}"


def test_the_history_check_sees_issue_numbers_and_hashes():
    assert history_references("fixed in issue 14 (#24) by ab8ffdf; see `c0ffee1`") == ["issue 14", "#24", "ab8ffdf"]
    assert history_references("a 2026-11-25 run of 1000000 keys, 0xFF tags, deadbeef words, #top") == []
