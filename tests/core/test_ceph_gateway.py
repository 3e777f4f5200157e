"""The test gateway itself: a real S3 server that keeps what is put, refuses a second
create-only put, counts the requests it serves, and stops answering when stopped."""

from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.support.ceph_gateway import CephGateway, S3Bucket, fetched_bytes

pytest_plugins = ["tests.support.ceph_fixtures"]
pytestmark = pytest.mark.s3


def _client(bucket: S3Bucket) -> object:
    return boto3.client(
        "s3",
        endpoint_url=bucket.endpoint,
        aws_access_key_id=bucket.access_key,
        aws_secret_access_key=bucket.secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def test_gateway_keeps_objects_and_refuses_a_second_create_only_put(
    ceph_gateway: CephGateway, s3_bucket: S3Bucket
) -> None:
    client = _client(s3_bucket)
    before = ceph_gateway.counters()
    client.put_object(Bucket=s3_bucket.name, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=s3_bucket.name, Key="k", Body=b"second", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=s3_bucket.name, Key="k")["Body"].read() == b"first"
    after = ceph_gateway.counters()
    assert after["get"] - before["get"] == 1
    assert fetched_bytes(before, after) == len(b"first")


def test_a_stopped_gateway_does_not_answer_and_comes_back(
    ceph_gateway: CephGateway, s3_bucket: S3Bucket
) -> None:
    client = _client(s3_bucket)
    client.put_object(Bucket=s3_bucket.name, Key="kept", Body=b"x")
    with ceph_gateway.stopped(), pytest.raises(EndpointConnectionError):
        client.get_object(Bucket=s3_bucket.name, Key="kept")
    assert client.get_object(Bucket=s3_bucket.name, Key="kept")["Body"].read() == b"x"
