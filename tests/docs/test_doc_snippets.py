"""Every ```python block of the state-as-data and operations pages runs, for real, like a notebook.

A reader copies these snippets; one that raises is a broken promise. So each page's python
blocks run in page order in one namespace (names one block defines are there for the next),
compiled with the page's file name and line numbers, so that a traceback points at the line of
the page that failed. A page is self-consistent: its first python block runs the small query
whose checkpoint the later blocks read, in a directory it makes with ``tempfile.mkdtemp()``.
As a notebook shows an expression's value, a batch DataFrame that a top-level expression gives
is collected, so that what a snippet builds also runs.

What the test gives a page, as a reader is assumed to have it:

* ``spark``: the tests' session, with spark-state's provider as the default state store
  provider (what :func:`spark_state.configure` sets), for the duration of the page;
* the working directory and ``tempfile``'s directory: the test's own temporary directory;
* for the S3 example of docs/operations.md (bucket ``backups``): the tests' moto server as the
  AWS endpoint, through the environment (``AWS_ENDPOINT_URL_S3`` and test credentials), the
  bucket created empty.

No python block is skipped: a block that is not Python (shell, output, a layout) carries
another fence (``bash``, ``console``, ``text``), and a fence without a language fails the test,
since it would hide a block from this check. The shell blocks' commands are checked too: every
``spark-state <command>`` and ``python -m spark_state <command>`` names a command, and every
``--flag`` on its line is one of that command's.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_state.__main__ import main
from spark_state.spark.jvm import PROVIDER_CLASS
from spark_state.spark.lines import running_line

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ("state-as-data.md", "operations.md")
#: Fence languages a page may use; ``python`` blocks run, the others are checked as commands
#: (``bash``, ``console``) or not at all (``text``).
LANGUAGES = {"python", "bash", "console", "text"}
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
#: The S3 bucket docs/operations.md's storage-options example writes and reads.
S3_BUCKET = "backups"


@dataclass(frozen=True)
class Block:
    language: str
    line: int  # the page's line number of the block's first line of code
    code: str


def parse_blocks(text: str, where: str) -> list[Block]:
    """The fenced blocks of a Markdown text, in order (``where`` names it in errors)."""
    found: list[Block] = []
    lines = text.splitlines()
    start, language = None, ""
    for number, line in enumerate(lines, 1):
        fence = re.match(r"^\s*```(.*)$", line)
        if not fence:
            continue
        if start is None:
            start, language = number, fence.group(1).strip()
        else:
            found.append(Block(language, start + 1, "\n".join(lines[start:number - 1])))
            start = None
    assert start is None, f"{where}:{start}: a fence that is never closed"
    return found


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``docs/<page>``, in page order."""
    return parse_blocks((DOCS / page).read_text(), f"docs/{page}")


@pytest.mark.parametrize("page", PAGES)
def test_every_fence_names_a_known_language(page):
    """A block without a language (or with an unknown one) would escape the runs below."""
    unknown = [(b.line - 1, b.language) for b in blocks(page) if b.language not in LANGUAGES]
    assert not unknown, f"docs/{page}: fences (line, language) outside {sorted(LANGUAGES)}: {unknown}"


def _command_help(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0, f"spark-state {command} --help exited with {exit_.value.code}"
    return out.getvalue()


@pytest.mark.parametrize("page", PAGES)
def test_shell_commands_exist(page):
    """Every command a shell block runs exists, with every flag the line gives it."""
    seen = 0
    for block in blocks(page):
        if block.language not in ("bash", "console"):
            continue
        for offset, text in enumerate(block.code.splitlines()):
            call = re.search(r"(?:spark-state|python -m spark_state)\s+([a-z][a-z-]*)(.*)", text)
            if not call:
                continue
            command, rest = call.group(1), call.group(2).split("#", 1)[0]
            usage = _command_help(command)
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest):
                assert re.search(rf"{flag}(?![\w-])", usage), (
                    f"docs/{page}:{block.line + offset}: spark-state {command} has no {flag}")
            seen += 1
    assert seen, f"docs/{page} names no spark-state command"


@pytest.fixture
def page_session(spark, tmp_path, monkeypatch):
    """The session a page's snippets get: spark-state's provider by default; the working and
    temporary directories in ``tmp_path``. Afterwards the session is as before: queries the
    page left running are stopped, its temporary views dropped, the provider conf restored."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = spark.conf.get(PROVIDER_CONF, None)
    views = {t.name for t in spark.catalog.listTables() if t.isTemporary}
    spark.conf.set(PROVIDER_CONF, PROVIDER_CLASS)
    try:
        yield spark
    finally:
        for query in spark.streams.active:
            query.stop()
        for table in spark.catalog.listTables():
            if table.isTemporary and table.name not in views:
                spark.catalog.dropTempView(table.name)
        if before is None:
            spark.conf.unset(PROVIDER_CONF)
        else:
            spark.conf.set(PROVIDER_CONF, before)


@pytest.fixture
def s3_bucket(s3_endpoint, monkeypatch):
    """The moto server as the AWS endpoint of every S3 client the snippets make."""
    import boto3

    for name, value in {"AWS_ENDPOINT_URL_S3": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=S3_BUCKET)
    return client


def run_page(page: str, spark) -> int:
    """Run ``docs/<page>``'s python blocks in order in one namespace; the number run.

    As a notebook shows the value of an expression, each top-level expression statement is
    evaluated and a batch DataFrame it gives is collected: a DataFrame fails only when it runs
    (a reader function that yields rows of the wrong width), and a reader runs what a snippet
    shows. An error gets a note naming the page's line.
    """
    from pyspark.sql import DataFrame

    path = str(DOCS / page)  # the page's own path: tracebacks show the page's lines
    # A module name that no import finds: cloudpickle ships the page's functions by value.
    namespace = {"__name__": "doc_snippets_" + re.sub(r"\W", "_", page), "spark": spark}
    ran = 0
    for block in blocks(page):
        if block.language != "python":
            continue
        # Blank lines ahead of the code give the compiled block the page's line numbers.
        tree = ast.parse("\n" * (block.line - 1) + block.code, path)
        for statement in tree.body:
            try:
                if isinstance(statement, ast.Expr):
                    value = eval(compile(ast.Expression(statement.value), path, "eval"), namespace)
                    if isinstance(value, DataFrame) and not value.isStreaming:
                        value.collect()
                else:
                    exec(compile(ast.Module([statement], type_ignores=[]), path, "exec"), namespace)
            except Exception as error:
                error.add_note(f"docs/{page}:{statement.lineno}: the snippet line that failed")
                raise
        ran += 1
    return ran


def python_fences(page: str) -> int:
    """The page's python blocks, counted on the raw text (not by :func:`blocks`)."""
    return len(re.findall(r"^```python$", (DOCS / page).read_text(), flags=re.M))


@pytest.mark.spark
def test_state_as_data_snippets_run(page_session):
    if running_line().name == "3.5":
        pytest.skip("the page's data source and Spark operators' reader need Spark 4.0+, as it says")
    assert run_page("state-as-data.md", page_session) == python_fences("state-as-data.md") > 10


@pytest.mark.spark
@pytest.mark.s3
def test_operations_snippets_run(page_session, s3_bucket):
    assert run_page("operations.md", page_session) == python_fences("operations.md") >= 3
    listed = s3_bucket.list_objects_v2(Bucket=S3_BUCKET, Prefix="sp1/")  # the S3 example went to moto
    assert "sp1/savepoint.json" in {entry["Key"] for entry in listed.get("Contents", [])}


def test_blocks_are_read_with_their_language_lines_and_code():
    text = "intro\n```python\nx = 1\n\ny = 2\n```\ntext\n  ```\nplain\n  ```\n```console\n$ spark-state get\n```\n"
    assert parse_blocks(text, "t.md") == [Block("python", 3, "x = 1\n\ny = 2"), Block("", 9, "plain"),
                                          Block("console", 12, "$ spark-state get")]
    with pytest.raises(AssertionError, match="t.md:2: a fence that is never closed"):
        parse_blocks("text\n```python\nx = 1\n", "t.md")
