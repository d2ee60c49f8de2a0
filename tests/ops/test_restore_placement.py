"""Where restore writes each process state (no Spark): by the options given, else where the
restored query started with the original's options looks for it -- recorded in the savepoint
as the state's placement; savepoints of earlier releases have none."""

from __future__ import annotations

import json

import pytest

from spark_state.ops import SavepointError
from spark_state.ops import savepoint_format as F
from spark_state.ops.restore import _process_targets
from spark_state.storage import open_storage


def _manifest(*entries: F.ProcessEntry) -> F.SavepointManifest:
    return F.SavepointManifest(source="/ck", query_id="old", batch_id=3, provider_class="p", partitions=2,
                               process=list(entries))


def _entry(name: str, under_root=None, placement: str = "") -> F.ProcessEntry:
    return F.ProcessEntry(name, "keyed", 128, 2, f"/somewhere/{name}", under_root, placement)


def test_targets_by_placement_and_options(tmp_path):
    target = open_storage(str(tmp_path / "new"))
    manifest = _manifest(_entry("beside", placement="checkpoint"), _entry("former", "/old", "former-default"),
                         _entry("rooted", "/r", "root"))
    assert _process_targets(manifest, target, "q2", None, {}) == {
        "beside": f"{tmp_path}/new/spark-state/beside", "former": f"{tmp_path}/new/spark-state/former",
        "rooted": "/r/q2/rooted"}
    assert _process_targets(manifest, target, "q2", "/x", {"rooted": "s3://b/r"}) == {
        "beside": "/x/q2/beside", "former": "/x/q2/former", "rooted": "s3://b/r"}
    with pytest.raises(SavepointError, match="--process-location mine=<new location>"):
        _process_targets(_manifest(_entry("mine", placement="explicit")), target, "q2", None, {})


def test_savepoints_of_earlier_releases_have_no_placement(tmp_path):
    doc = json.loads(_manifest(_entry("rooted", "/r")).to_json())
    for p in doc["process"]:
        del p["placement"]
    manifest = F.SavepointManifest.from_json(json.dumps(doc).encode(), "savepoint.json")
    assert manifest.process[0].placement == ""
    assert _process_targets(manifest, open_storage(str(tmp_path / "new")), "q2", None, {}) == {"rooted": "/r/q2/rooted"}
