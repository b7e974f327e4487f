"""head.json: atomic writes, defensive reads, withdrawal."""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timedelta, timezone

import msgspec
import pytest

from argus.nodepool import (
    HeadRecord,
    expire_head_record,
    make_head_record,
    read_head_record,
    write_head_record,
)

NOW = datetime(2025, 12, 25, 17, 0, 0, tzinfo=timezone.utc)


def _record(**kw):
    args = dict(cluster_name="argus-ray", head_ip="10.0.0.12", gcs_port=6379,
                dashboard_port=8265, ttl_s=60, now=NOW)
    args.update(kw)
    return make_head_record(**args)


def test_record_has_the_seed_fields_in_the_seed_format(tmp_path):
    path = tmp_path / "d" / "head.json"
    write_head_record(path, _record(head_id="abc"))
    doc = json.loads(path.read_text())
    assert doc["cluster_name"] == "argus-ray"
    assert doc["head_ip"] == "10.0.0.12"
    assert doc["gcs_port"] == 6379 and doc["dashboard_port"] == 8265
    assert doc["job_server_url"] == "http://10.0.0.12:8265"
    assert doc["updated_at"] == "2025-12-25T17:00:00Z"
    assert doc["expires_at"] == "2025-12-25T17:01:00Z"
    assert doc["head_id"] == "abc"


def test_seed_example_without_argus_fields_is_readable(tmp_path):
    path = tmp_path / "head.json"
    path.write_text(json.dumps({
        "cluster_name": "argus-ray", "head_ip": "10.0.0.12", "gcs_port": 6379,
        "dashboard_port": 8265, "job_server_url": "http://10.0.0.12:8265",
        "updated_at": "2025-12-25T17:00:00Z", "expires_at": "2025-12-25T17:01:00Z",
        "some_future_field": [1, 2]}))
    result = read_head_record(path, now=NOW + timedelta(seconds=30))
    assert result.usable and result.record.head_id == ""
    assert read_head_record(path, now=NOW + timedelta(seconds=61)).reason == "expired"


@pytest.mark.parametrize("content,reason", [
    (None, "missing"),
    (b"", "garbage"),
    (b'{"cluster_name": "argus-ray", "head_ip": "10.0', "garbage"),  # torn write
    (b"\x00\xff\xfe", "garbage"),
    (b"[1, 2, 3]", "garbage"),
    (b'{"cluster_name": "argus-ray"}', "garbage"),  # fields missing
    (b'{"cluster_name":"argus-ray","head_ip":"","gcs_port":6379,"dashboard_port":1,'
     b'"job_server_url":"x","updated_at":"2025-12-25T17:00:00Z",'
     b'"expires_at":"2025-12-25T18:00:00Z"}', "garbage"),  # no address
    (b'{"cluster_name":"argus-ray","head_ip":"h","gcs_port":6379,"dashboard_port":1,'
     b'"job_server_url":"x","updated_at":"2025-12-25T17:00:00",'
     b'"expires_at":"2025-12-25T18:00:00"}', "garbage"),  # naive timestamps
    (b"x" * 70_000, "too_large"),
])
def test_bad_files_are_reasons_to_wait_never_exceptions(tmp_path, content, reason):
    path = tmp_path / "head.json"
    if content is not None:
        path.write_bytes(content)
    result = read_head_record(path, cluster_name="argus-ray", now=NOW)
    assert result.reason == reason
    assert not result.usable


def test_unreadable_path_is_a_reason(tmp_path):
    # A directory where the file should be: read fails with an OSError, not a crash.
    (tmp_path / "head.json").mkdir()
    assert read_head_record(tmp_path / "head.json").reason == "unreadable"


def test_expired_and_other_cluster(tmp_path):
    path = tmp_path / "head.json"
    write_head_record(path, _record())
    assert read_head_record(path, now=NOW + timedelta(seconds=59)).usable
    assert read_head_record(path, now=NOW + timedelta(seconds=60)).reason == "expired"
    other = read_head_record(path, cluster_name="other", now=NOW)
    assert other.reason == "wrong_cluster"


def test_write_is_atomic_under_concurrent_reads(tmp_path):
    """A reader polling while the head rewrites never sees a partial file."""
    path = tmp_path / "head.json"
    write_head_record(path, _record(head_id="0"))
    stop = threading.Event()
    bad: list[str] = []

    def reader():
        while not stop.is_set():
            result = read_head_record(path, now=NOW)
            if not result.usable:
                bad.append(result.reason + result.detail)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(300):
            # A long node_name makes a torn write likely to be caught if it could happen.
            write_head_record(path, _record(head_id=str(i), node_name="n" * (i * 37 % 5000)))
    finally:
        stop.set()
        thread.join()
    assert bad == []
    assert [p.name for p in tmp_path.iterdir()] == ["head.json"], "temp files left behind"


def test_write_failure_leaves_old_record_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "head.json"
    write_head_record(path, _record(head_id="old"))

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        write_head_record(path, _record(head_id="new"))
    monkeypatch.undo()
    assert read_head_record(path, now=NOW).record.head_id == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["head.json"]


def test_expire_only_touches_our_own_record(tmp_path):
    path = tmp_path / "head.json"
    write_head_record(path, _record(head_id="mine", now=datetime.now(timezone.utc)))
    assert not expire_head_record(path, "someone-else")
    assert read_head_record(path).usable
    assert expire_head_record(path, "mine")
    result = read_head_record(path)
    assert result.reason == "expired" and result.record.withdrawn
    assert not expire_head_record(tmp_path / "absent.json", "mine")


def test_identity_ignores_refreshes():
    a = _record(head_id="h1")
    b = msgspec.structs.replace(a, updated_at=NOW + timedelta(seconds=10),
                                expires_at=NOW + timedelta(seconds=70))
    assert a.identity() == b.identity()
    assert not b.withdrawn
    assert _record(head_id="h2").identity() != a.identity()
    assert _record(head_id="h1", gcs_port=6380).identity() != a.identity()
    assert isinstance(a, HeadRecord)
    assert _record(head_ip="fd00::2").job_server_url == "http://[fd00::2]:8265"
