"""Local working directories: a process killed with SIGKILL (as PySpark's daemon stops its
workers) leaves its directory behind; the next process that opens one in the same parent
removes it, and never the directory of a live process or one it does not own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from spark_state import EngineConfig, VersionedStore
from spark_state.engine.localdirs import OWNER_FILE, PREFIX

# Opens a store under the given localDir (so a RocksDB working copy exists), prints its
# process directory, then waits for stdin to close (or is killed meanwhile).
CHILD = """
import sys
from spark_state import EngineConfig, VersionedStore
store = VersionedStore(sys.argv[2], EngineConfig(local_dir=sys.argv[1])).load(0)
store.put(b"k", b"v"); store.commit()
from spark_state.engine.localdirs import process_root
print(process_root(sys.argv[1]), flush=True)
sys.stdin.read()
"""


def _start(local: str, ckpt: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, local, ckpt], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    root = proc.stdout.readline().strip()
    assert root.startswith(os.path.join(local, PREFIX)), root
    return proc, root


def test_directories_of_killed_processes_are_removed_by_the_next_process(tmp_path):
    local = str(tmp_path / "local")
    killed, killed_root = _start(local, str(tmp_path / "c1"))
    live, live_root = _start(local, str(tmp_path / "c2"))
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert any(n.startswith("store-") for n in os.listdir(killed_root))  # a working copy was left behind
    foreign = tmp_path / "local" / f"{PREFIX}made-by-someone-else"  # no owner file: never touched
    foreign.mkdir()

    store = VersionedStore(str(tmp_path / "c3"), EngineConfig(local_dir=local)).load(0)  # this process's root
    try:
        assert not os.path.exists(killed_root)
        assert os.path.isdir(live_root) and os.path.isfile(os.path.join(live_root, OWNER_FILE))
        assert foreign.is_dir()
    finally:
        store.close()
        live.stdin.close()
        live.wait(timeout=60)
    assert live.returncode == 0 and not os.path.exists(live_root)  # a normal exit removes its own


def test_a_forked_child_gets_a_directory_of_its_own(tmp_path):
    from spark_state.engine.localdirs import process_root

    local = str(tmp_path / "local")
    mine = process_root(local)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read)
        os.write(write, process_root(local).encode())
        os._exit(0)
    os.close(write)
    child_root = os.read(read, 4096).decode()
    os.waitpid(pid, 0)
    assert child_root != mine and child_root.startswith(os.path.join(local, PREFIX))
