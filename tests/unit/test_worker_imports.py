"""The provider's Python worker starts without pandas (``spark_state.provider.no_pandas``): the
modules it imports must not convert Python objects with pyarrow at import time (that imports
pandas), and once the block is installed pyarrow still converts, without pandas."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_importing_the_worker_and_its_service_does_not_import_pandas():
    proc = _run("import sys\n"
                "import spark_state.provider.worker, spark_state.provider.service\n"
                "print(sorted(m for m in sys.modules if m == 'pandas' or m.startswith('pandas.')))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", "a module the worker imports loads pandas at import: " + proc.stdout


def test_with_the_block_pyarrow_converts_without_pandas_and_pandas_cannot_load():
    proc = _run("import sys\n"
                "from spark_state.provider.no_pandas import install\n"
                "install(); install()\n"
                "import pyarrow as pa\n"
                "from spark_state.checkpoint import changelog\n"
                "data = changelog.encode_columns(3, pa.chunked_array([[b'a', b'b']]), pa.chunked_array([[b'1', None]]))\n"
                "print(list(changelog.decode(data, 'changelog-3', 3)))\n"
                "print(pa.array([1, 2]).to_pylist(), 'pandas' in sys.modules)\n"
                "import pandas\n")
    assert "[(b'a', b'1'), (b'b', None)]" in proc.stdout, proc.stdout + proc.stderr
    assert "[1, 2] False" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode != 0 and "spark-state's provider worker does not load pandas" in proc.stderr


@pytest.mark.parametrize("name", ["pandas", "pandas.core"])
def test_the_block_refuses_pandas_and_its_submodules(name):
    proc = _run("from spark_state.provider.no_pandas import install\n"
                "install()\n"
                "import importlib\n"
                "try:\n"
                f"    importlib.import_module({name!r}); print('loaded')\n"
                "except ModuleNotFoundError as e:\n"
                "    print('refused', e.name)\n")
    # (a submodule's import starts with its parent's, which is what is refused)
    assert proc.stdout.split() == ["refused", "pandas"], proc.stdout + proc.stderr
