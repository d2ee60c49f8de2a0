"""HDFS storage, tested at its edges.

There is no HDFS server on CI (none can be installed here: no Hadoop package on Debian,
PyPI or npm, and no Maven Central for a MiniDFSCluster). So these tests cover what can
be checked honestly without one: URL resolution to hdfs-native's fsspec class, option
handling, fail-fast behaviour against unreachable NameNodes, and error mapping. The write
path (temp file + rename) is exercised against a small in-memory fake of the hdfs-native
file system, labelled as such. The one real round trip is opt-in via $HDFS_NAMENODE_URL.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid
from typing import Any, Iterator

import pytest

from spark_state.errors import CheckpointFileMissingError, ConfigError, StorageUnavailableError
from spark_state.storage import FsspecStorage, open_storage
from spark_state.storage import remote
from spark_state.storage.hdfs import HdfsBackend

hdfs_native_fsspec = pytest.importorskip("hdfs_native.fsspec")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open HDFS storage without contacting the NameNode (there is none)."""
    monkeypatch.setattr(FsspecStorage, "probe", lambda self, timeout=None: None)


@pytest.fixture
def silent_namenode() -> Iterator[str]:
    """A TCP port that accepts connections and never answers (a hung NameNode)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.1)  # so the accept loop notices `stop`
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:  # includes socket.timeout
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    server.close()
    for conn in held:
        conn.close()


# ---- resolution and options ---------------------------------------------------------


def test_hdfs_url_resolves_to_hdfs_native_filesystem(no_probe: None) -> None:
    storage = open_storage("hdfs://namenode.example:8020/ckpt/q1/")
    assert isinstance(storage, FsspecStorage)
    assert isinstance(storage.fs, hdfs_native_fsspec.HdfsFileSystem)
    assert (storage.fs.host, storage.fs.port) == ("namenode.example", 8020)
    assert storage.url == "hdfs://namenode.example:8020/ckpt/q1"
    assert storage.root == "/ckpt/q1"
    assert storage.full_url("state/0/1.changelog") == "hdfs://namenode.example:8020/ckpt/q1/state/0/1.changelog"
    child = storage.child("state/0")
    assert child.fs is storage.fs and child.root == "/ckpt/q1/state/0"


def test_fail_fast_defaults_and_hdfs_options_reach_hdfs_native(no_probe: None) -> None:
    default = open_storage("hdfs://nn:8020/x")
    assert default.fs.storage_options["dfs.client.failover.max.attempts"] == "2"
    tuned = open_storage(
        "hdfs://nn:8020/x",
        {"hdfs.dfs.client.failover.max.attempts": "15", "hdfs.dfs.client.use.datanode.hostname": "true"},
    )
    assert tuned.fs.storage_options["dfs.client.failover.max.attempts"] == "15"
    assert tuned.fs.storage_options["dfs.client.use.datanode.hostname"] == "true"
    assert "hdfs.dfs.client.failover.max.attempts" not in tuned.fs.storage_options
    assert tuned.fs is not default.fs  # no shared fsspec instance cache


def test_viewfs_resolves_to_hdfs_native_viewfs(no_probe: None) -> None:
    storage = open_storage(
        "viewfs://cluster/ckpt",
        {"hdfs.fs.viewfs.mounttable.cluster.linkFallback": "hdfs://nn:8020/"},
    )
    assert isinstance(storage.fs, hdfs_native_fsspec.ViewfsFileSystem)
    assert storage.root == "/ckpt"


def test_viewfs_without_mount_table_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="viewfs://nocluster/ckpt"):
        open_storage("viewfs://nocluster/ckpt")


def test_unknown_scheme_lists_supported_ones() -> None:
    with pytest.raises(ConfigError) as info:
        open_storage("gs://bucket/ckpt")
    message = str(info.value)
    assert "'gs'" in message
    for scheme in ("file://", "s3://", "s3a://", "hdfs://", "viewfs://"):
        assert scheme in message


@pytest.mark.parametrize("key", ["endpoint", "fs.s3a.endpoint", "s3.endpoint", "S3.region"])
def test_unknown_option_names_key_and_lists_valid_ones(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        open_storage("/tmp/whatever", {key: "x"})
    message = str(info.value)
    assert repr(key) in message
    assert "s3.endpoint_url" in message and "hdfs.<hadoop configuration key>" in message


def test_bad_option_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="s3.anonymous"):
        open_storage("s3://b/x", {"s3.anonymous": "maybe"})
    with pytest.raises(ConfigError, match="s3.secret_access_key"):
        open_storage("s3://b/x", {"s3.access_key_id": "only-half"})
    with pytest.raises(ConfigError, match="bucket"):
        open_storage("s3:///x")
    with pytest.raises(ConfigError, match="Hadoop"):
        open_storage("hdfs://nn:8020/x", {"hdfs.": "1"})


@pytest.mark.parametrize(
    ("module", "url", "extra"),
    [("hdfs_native.fsspec", "hdfs://nn:8020/x", "hdfs"), ("s3fs", "s3://bucket/x", "s3")],
)
def test_missing_client_library_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch, module: str, url: str,
                                                           extra: str) -> None:
    """S3 and HDFS are optional extras of spark-state: without the client library, the error names the extra."""
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(ConfigError, match=rf"pip install 'spark-state\[{extra}\]'"):
        open_storage(url)


# ---- unreachable NameNodes ----------------------------------------------------------


def test_unreachable_namenode_fails_fast_naming_the_url() -> None:
    url = f"hdfs://127.0.0.1:{free_port()}/ckpt"
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError) as info:
        open_storage(url)
    elapsed = time.monotonic() - start
    assert elapsed < 15, f"took {elapsed:.1f} s"
    message = str(info.value)
    assert url in message
    assert "Connection refused" in message
    assert "NameNode" in message and "hdfs.dfs.client.failover.max.attempts" in message


def test_unresolvable_namenode_host_fails_fast() -> None:
    url = "hdfs://no-such-namenode.invalid:8020/ckpt"
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="no-such-namenode.invalid"):
        open_storage(url)
    assert time.monotonic() - start < 15


def test_silent_namenode_times_out_instead_of_hanging(silent_namenode: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # hdfs-native waits forever for a server that accepts but never replies; the probe's
    # own deadline (10 s by default, shortened here to keep the test quick) bounds it.
    monkeypatch.setattr(remote, "PROBE_TIMEOUT_S", 1.0)
    url = f"hdfs://{silent_namenode}/ckpt"
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="did not answer within 1 s") as info:
        open_storage(url)
    assert time.monotonic() - start < 5
    assert url in str(info.value)


def test_namenode_lost_after_open_gives_unavailable_on_use(no_probe: None) -> None:
    storage = open_storage(f"hdfs://127.0.0.1:{free_port()}/ckpt")
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError) as info:
        storage.read_bytes("0/1.changelog")
    assert time.monotonic() - start < 15
    assert storage.full_url("0/1.changelog") in str(info.value)
    with pytest.raises(StorageUnavailableError):
        storage.write_bytes("0/2.changelog", b"x")


# ---- error mapping and the write protocol, against a fake -----------------------------


def rpc_error(java_class: str, message: str) -> RuntimeError:
    """The shape in which hdfs-native 0.14 surfaces NameNode exceptions."""
    return RuntimeError(f'RPCError("{java_class}", "{message}")')


def test_namenode_exceptions_are_normalised() -> None:
    backend = HdfsBackend("nn:8020", "2")
    exists = backend.normalize(rpc_error("org.apache.hadoop.fs.FileAlreadyExistsException", "/a exists"))
    assert isinstance(exists, FileExistsError)
    denied = backend.normalize(rpc_error("org.apache.hadoop.security.AccessControlException", "no"))
    assert isinstance(denied, PermissionError)
    assert backend.is_unavailable(OSError("Connection refused (os error 111)"))
    assert backend.is_unavailable(OSError("RPC listener disconnected"))
    assert not backend.is_unavailable(OSError("Input/output error: bad block"))


class FakeHdfs:
    """In-memory stand-in for ``hdfs_native.fsspec.HdfsFileSystem`` (a test fake, not HDFS).

    It implements the calls FsspecStorage makes, with HDFS semantics: files being written
    are visible under their own name; rename without overwrite fails on an existing target
    with the RuntimeError hdfs-native raises.
    """

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.renames: list[tuple[str, str, bool]] = []
        self.fail_close = False

    @staticmethod
    def _strip_protocol(path: str) -> str:
        return path

    def open(self, path: str, mode: str, overwrite: bool = True) -> Any:
        assert mode == "wb" and overwrite is False
        fake = self

        class Writer:
            def __init__(self) -> None:
                self.buf = bytearray()
                fake.files[path] = b""  # visible, empty, while being written

            def write(self, data: bytes) -> int:
                self.buf += data
                return len(data)

            def __enter__(self) -> "Writer":
                return self

            def __exit__(self, *exc: object) -> None:
                fake.files[path] = bytes(self.buf)
                if fake.fail_close:
                    raise OSError("Input/output error: pipeline failed")

        return Writer()

    def mv(self, src: str, dst: str, overwrite: bool = False) -> None:
        self.renames.append((src, dst, overwrite))
        if dst in self.files and not overwrite:
            raise rpc_error("org.apache.hadoop.fs.FileAlreadyExistsException", f"rename destination {dst} exists")
        self.files[dst] = self.files.pop(src)

    def rm_file(self, path: str) -> None:
        self.files.pop(path, None)

    def cat_file(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]


@pytest.fixture
def fake() -> tuple[FsspecStorage, FakeHdfs]:
    fs = FakeHdfs()
    return FsspecStorage(fs, "hdfs://nn:8020/ckpt", "/ckpt", HdfsBackend("nn:8020", "2")), fs


def test_write_goes_through_temp_file_and_atomic_rename(fake: tuple[FsspecStorage, FakeHdfs]) -> None:
    storage, fs = fake
    storage.write_bytes("0/1.changelog", b"data")
    [(src, dst, overwrite)] = fs.renames
    assert dst == "/ckpt/0/1.changelog" and overwrite is True
    assert src.startswith("/ckpt/0/.1.changelog.") and src.endswith(".tmp")
    assert fs.files == {"/ckpt/0/1.changelog": b"data"}
    assert storage.read_bytes("0/1.changelog") == b"data"


def test_create_if_absent_uses_rename_without_overwrite(fake: tuple[FsspecStorage, FakeHdfs]) -> None:
    storage, fs = fake
    storage.write_bytes("commit", b"first", overwrite=False)
    with pytest.raises(FileExistsError, match="hdfs://nn:8020/ckpt/commit"):
        storage.write_bytes("commit", b"second", overwrite=False)
    assert fs.files == {"/ckpt/commit": b"first"}  # temp file cleaned up
    assert [r[2] for r in fs.renames] == [False, False]


def test_failed_write_leaves_target_untouched_and_no_temp(fake: tuple[FsspecStorage, FakeHdfs]) -> None:
    storage, fs = fake
    storage.write_bytes("m", b"old")
    fs.fail_close = True
    with pytest.raises(OSError, match="write hdfs://nn:8020/ckpt/m failed"):
        storage.write_bytes("m", b"new")
    assert fs.files == {"/ckpt/m": b"old"}
    with pytest.raises(CheckpointFileMissingError, match="hdfs://nn:8020/ckpt/nope"):
        storage.read_bytes("nope")


# ---- opt-in: a real NameNode ----------------------------------------------------------


@pytest.mark.hdfs
def test_round_trip_against_real_namenode(tmp_path: Any) -> None:
    base = os.environ.get("HDFS_NAMENODE_URL")
    if not base:
        pytest.skip("needs a real HDFS NameNode at $HDFS_NAMENODE_URL; CI has no HDFS, so this does not run there")
    storage = open_storage(f"{base.rstrip('/')}/spark-state-test-{uuid.uuid4().hex[:8]}")
    try:
        storage.write_bytes("0/1.changelog", b"one")
        storage.write_bytes("0/1.changelog", b"two")
        assert storage.read_bytes("0/1.changelog") == b"two"
        with pytest.raises(FileExistsError):
            storage.write_bytes("0/1.changelog", b"three", overwrite=False)
        storage.write_bytes("0/2.changelog", b"x", overwrite=False)
        assert storage.list_dir("0") == ["1.changelog", "2.changelog"]
        assert storage.size("0/2.changelog") == 1 and storage.exists("0/2.changelog")
        payload = os.urandom(5 * 1024 * 1024)
        (tmp_path / "in.sst").write_bytes(payload)
        storage.upload_file(str(tmp_path / "in.sst"), "sst/1.sst")
        storage.download_file("sst/1.sst", str(tmp_path / "out.sst"))
        assert (tmp_path / "out.sst").read_bytes() == payload
        with pytest.raises(CheckpointFileMissingError):
            storage.read_bytes("0/9.changelog")
        storage.delete_many(["0/1.changelog", "0/2.changelog", "sst/1.sst", "0/missing"])
        assert storage.list_dir("0") == []
    finally:
        storage.fs.rm(storage.root, recursive=True)
        storage.close()
