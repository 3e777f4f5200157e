"""LangGraph values kept in the blob store (over 64 KiB) reach the object store as a
checkpoint's blobs do: queued once the row naming them is committed, uploaded behind it
(a real S3 server, Ceph's gateway; `tests.support.deployment`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ditto_jupyter.core.blobs.replica import manifest_key
from ditto_jupyter.core.models.langgraph import (
    LangGraphChannelValue,
    LangGraphCheckpoint,
    LangGraphValue,
    LangGraphWrite,
)
from ditto_jupyter.langgraph.values import ValueCodec
from tests.support.ceph_gateway import CephGateway, S3Bucket
from tests.support.deployment import Deployment, deploy

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = pytest.mark.s3


@pytest.fixture
def deployment(
    tmp_path: Path, ceph_gateway: CephGateway, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deployment]:
    yield from deploy(tmp_path, ceph_gateway, s3_bucket, monkeypatch)


def test_large_values_are_uploaded_behind_their_rows(deployment: Deployment) -> None:
    server = deployment.server("a")
    runtime_id = asyncio.run(server.create_runtime("agent.ipynb", "ana")).runtime_id
    codec = ValueCodec(JsonPlusSerializer(), server.blobs, runtime_id)
    first = os.urandom(300_000)
    channel_value, write_value = codec.place_all([("bytes", first), ("bytes", os.urandom(200_000))])
    assert channel_value.manifest_id is not None and write_value.manifest_id is not None
    with deployment.gateway.stopped():  # the uploads stay queued meanwhile
        server.langgraph.put(
            runtime_id,
            LangGraphCheckpoint(
                thread_id="t",
                checkpoint_id="01",
                checkpoint=LangGraphValue(type="msgpack", data=b"\x80"),
                versions={"big": "1"},
                metadata={},
                values=[LangGraphChannelValue(channel="big", version="1", value=channel_value)],
            ),
        )
        server.langgraph.put_writes(
            runtime_id,
            "t",
            "",
            "01",
            [LangGraphWrite(task_id="task", idx=0, channel="big", value=write_value)],
            replace=False,
        )
        # a later put naming the same value (the same manifest) first, and a new one
        again, other = codec.place_all([("bytes", first), ("bytes", os.urandom(100_000))])
        assert again.manifest_id == channel_value.manifest_id and other.manifest_id is not None
        server.langgraph.put(
            runtime_id,
            LangGraphCheckpoint(
                thread_id="t",
                checkpoint_id="02",
                checkpoint=LangGraphValue(type="msgpack", data=b"\x80"),
                versions={"big": "1", "other": "1"},
                metadata={},
                values=[
                    LangGraphChannelValue(channel="big", version="1", value=again),
                    LangGraphChannelValue(channel="other", version="1", value=other),
                ],
            ),
        )
    assert server.replication.drain(timeout=120), "the uploads did not finish"
    replica = server.replication.replica
    assert replica is not None
    for manifest in (channel_value.manifest_id, write_value.manifest_id, other.manifest_id):
        assert replica.bucket.exists(manifest_key(manifest)), manifest
