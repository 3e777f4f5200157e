"""An S3-compatible bucket, as the blob store's replica uses it: create-only puts, gets, heads,
listings and deletes (garbage collection).

The client is boto3 (botocore): it has the whole standard AWS credential chain
(environment variables, the shared credentials and config files with their profiles, SSO,
assume-role and web identity, container and instance roles), and PutObject's
`IfNoneMatch="*"`, which makes a put create-only: content-addressed objects are never
rewritten, so a retried or concurrent upload of the same chunk is harmless. Its clients
are thread-safe, so one serves every upload and fetch thread.

Credentials are never passed in, stored or printed here: the session finds them, and an
error names only where they came from (`env`, `shared-credentials-file`, `iam-role`...).
Every failure is one `ObjectStoreUnavailable` sentence that names what failed: the object
store cannot be reached, it refused the credentials, the bucket does not exist, or it
answered an error of its own. Checksums are sent only where S3 requires them (several
S3-compatible servers refuse the default trailing checksums of boto3 1.36 and later).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ditto_jupyter.core.blobs.errors import (
    BlobError,
    BlobNotFound,
    BlobSettingError,
    ObjectStoreUnavailable,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: Attempts a request gets in all (botocore's standard retry mode: throttling, 5xx, resets,
#: timeouts), and the seconds each waits to connect and for the next bytes of an answer. An
#: object store that accepts connections and never answers fails a request after about
#: 2 x 3 s (plus under a second of back-off between the two), so a pause or a resume it
#: hangs answers 503 within about 10 s. A transfer that makes progress is never cut: the
#: read timeout is the longest silence between two reads of the socket, not a total.
MAX_ATTEMPTS = 2
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 3.0
#: Concurrent connections kept to the endpoint (one per upload or fetch thread).
MAX_CONNECTIONS = 16
#: Error codes that mean the credentials were refused (not a missing bucket or key).
REFUSED_CREDENTIALS = frozenset(
    {
        "AccessDenied",
        "AuthorizationHeaderMalformed",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
        "403",
    }
)
#: A conditional write racing another one on the same key (AWS answers 409): try again.
_CONFLICT_RETRIES = 5
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectStoreLocation:
    """Where a blob store's replica lives: a bucket, a key prefix, and the endpoint."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None

    @classmethod
    def parse(
        cls, url: str, *, endpoint_url: str | None = None, region: str | None = None
    ) -> ObjectStoreLocation:
        """`s3://bucket/optional/prefix`; a BlobSettingError naming the setting and what is
        wrong otherwise."""
        parsed = urlparse(url.strip())
        shown = url
        if "@" in parsed.netloc:  # never print what may be a key
            shown = parsed._replace(netloc="***@" + parsed.netloc.rpartition("@")[2]).geturl()
        setting = f"blob_store_url (DITTO_BLOB_STORE_URL) {shown!r}"
        if parsed.scheme != "s3":
            raise BlobSettingError(
                f"{setting} is not an s3:// URL: it must be of the form s3://bucket/prefix "
                "(any S3-compatible store; its address goes in blob_store_endpoint)"
            )
        if not parsed.netloc:
            raise BlobSettingError(
                f"{setting} names no bucket: it must be of the form s3://bucket/prefix"
            )
        if parsed.query or parsed.fragment or "@" in parsed.netloc:
            raise BlobSettingError(
                f"{setting} must hold only a bucket and a prefix, of the form "
                "s3://bucket/prefix (credentials come from the standard AWS chain, the "
                "endpoint from blob_store_endpoint)"
            )
        prefix = parsed.path.strip("/")
        endpoint = (endpoint_url or "").strip() or None
        if endpoint is not None:
            _check_endpoint(endpoint)
        return cls(
            bucket=parsed.netloc,
            prefix=f"{prefix}/" if prefix else "",
            endpoint_url=endpoint,
            region=(region or "").strip() or None,
        )

    @property
    def url(self) -> str:
        """The `s3://bucket/prefix` URL."""
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def __str__(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"{self.url}{where}"

    def key(self, name: str) -> str:
        """The object key of `name` (`chunks/<hex>`, `manifests/<hex>`) under the prefix."""
        return self.prefix + name


class ObjectStore:
    """One bucket of an S3-compatible object store (see the module)."""

    def __init__(self, location: ObjectStoreLocation) -> None:
        import boto3
        from botocore.config import Config

        self.location = location
        self._session = boto3.session.Session()
        region = location.region or self._session.region_name or "us-east-1"
        config = Config(
            s3={"addressing_style": "path" if location.endpoint_url else "auto"},
            retries={"total_max_attempts": MAX_ATTEMPTS, "mode": "standard"},
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            max_pool_connections=MAX_CONNECTIONS,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        self._client: S3Client = self._session.client(
            "s3", endpoint_url=location.endpoint_url, region_name=region, config=config
        )

    def __str__(self) -> str:
        return str(self.location)

    # ---- requests ---------------------------------------------------------------------

    def put_new(self, name: str, body: bytes) -> bool:
        """Create the object `name` unless it exists; whether this call created it."""
        key = self.location.key(name)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                self._client.put_object(
                    Bucket=self.location.bucket, Key=key, Body=body, IfNoneMatch="*"
                )
                return True
            except Exception as error:
                status, code = _status_and_code(error)
                if status == 412 or code == "PreconditionFailed":
                    return False  # there already: the same content, by its name
                if status == 409 and attempt + 1 < _CONFLICT_RETRIES:
                    time.sleep(0.05 * (attempt + 1))  # another conditional put of it
                    continue
                raise self.failure(error, f"writing {name}") from None
        raise ObjectStoreUnavailable(f"writing {name} to {self.location} kept conflicting")

    def get(self, name: str) -> bytes:
        """The object `name`; BlobNotFound when the bucket has no such object."""
        try:
            answer = self._client.get_object(
                Bucket=self.location.bucket, Key=self.location.key(name)
            )
            data: bytes = answer["Body"].read()
            return data
        except Exception as error:
            _, code = _status_and_code(error)
            if code in ("NoSuchKey", "404"):
                raise BlobNotFound(f"{name} is not in the object store {self.location}") from None
            raise self.failure(error, f"reading {name}") from None

    def exists(self, name: str) -> bool:
        """Whether the object `name` exists."""
        try:
            self._client.head_object(Bucket=self.location.bucket, Key=self.location.key(name))
            return True
        except Exception as error:
            status, code = _status_and_code(error)
            if status != 404 or code == "NoSuchBucket":
                raise self.failure(error, f"looking for {name}") from None
        # a HEAD answer has no body, so a 404 does not say whether the bucket is missing
        self.check()
        return False

    def delete(self, name: str) -> None:
        """Remove the object `name` (nothing happens when it is not there)."""
        try:
            self._client.delete_object(Bucket=self.location.bucket, Key=self.location.key(name))
        except Exception as error:
            raise self.failure(error, f"deleting {name}") from None

    def listing(self, folder: str) -> dict[str, float]:
        """The objects under `folder` (`chunks/`, `manifests/`): name (as `get` takes it)
        to when it was last written (seconds since the epoch, the object store's clock)."""
        found: dict[str, float] = {}
        start = len(self.location.prefix)
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=self.location.key(folder)
            )
            for page in pages:
                for entry in page.get("Contents", []):
                    found[entry["Key"][start:]] = entry["LastModified"].timestamp()
        except Exception as error:
            raise self.failure(error, f"listing {folder}") from None
        return found

    def check(self) -> None:
        """Ask for the bucket itself: ObjectStoreUnavailable unless it is there and these
        credentials may use it."""
        try:
            self._client.head_bucket(Bucket=self.location.bucket)
        except Exception as error:
            status, _ = _status_and_code(error)
            if status == 404:
                raise self._missing_bucket("opening the bucket") from None
            raise self.failure(error, "opening the bucket") from None

    # ---- errors -----------------------------------------------------------------------

    def credentials_source(self) -> str:
        """Where the chain found credentials (`env`, `shared-credentials-file`...), or
        "none found"; never the credentials themselves."""
        try:
            found = self._session.get_credentials()
        except Exception as error:  # a broken config file: say so, the request fails anyway
            _log.info("the AWS credential chain failed: %s", type(error).__name__)
            return "a credential source that failed"
        if found is None:
            return "none found"
        method = getattr(found, "method", None)
        return str(method) if method else "an unnamed source"

    def _missing_bucket(self, doing: str) -> ObjectStoreUnavailable:
        endpoint = self.location.endpoint_url or "AWS S3"
        return ObjectStoreUnavailable(
            f"{doing} failed: the bucket {self.location.bucket!r} does not exist on {endpoint}; "
            "create it, or correct blob_store_url"
        )

    def failure(self, error: Exception, doing: str) -> BlobError:
        """The one sentence naming what failed while `doing` (a boto3/botocore error)."""
        from botocore.exceptions import (
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
            ReadTimeoutError,
        )

        where = self.location
        if isinstance(error, NoCredentialsError | PartialCredentialsError):
            return ObjectStoreUnavailable(
                f"{doing} in {where} failed: the standard AWS credential chain found no "
                "credentials (environment variables, a shared credentials or config file, "
                "or an instance or container role)"
            )
        if isinstance(
            error,
            EndpointConnectionError
            | ConnectTimeoutError
            | ReadTimeoutError
            | ConnectionClosedError,
        ):
            return ObjectStoreUnavailable(
                f"{doing} in {where} failed: the object store cannot be reached "
                f"({type(error).__name__})"
            )
        status, code = _status_and_code(error)
        if code == "NoSuchBucket":
            return self._missing_bucket(f"{doing} in {where}")
        if code in REFUSED_CREDENTIALS or status == 403:
            return ObjectStoreUnavailable(
                f"{doing} in {where} failed: the object store refused the credentials "
                f"({code or status}; credentials from {self.credentials_source()})"
            )
        if status is None:  # not an answer of the server: a failure on the way
            return ObjectStoreUnavailable(
                f"{doing} in {where} failed: the object store cannot be reached "
                f"({type(error).__name__})"
            )
        return ObjectStoreUnavailable(
            f"{doing} in {where} failed: the object store answered {status} {code}"
        )


def _check_endpoint(endpoint: str) -> None:
    """BlobSettingError unless `endpoint` is an http(s) URL with a host and a valid port."""
    parsed = urlparse(endpoint)
    setting = f"blob_store_endpoint (DITTO_BLOB_STORE_ENDPOINT) {endpoint!r}"
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise BlobSettingError(f"{setting} is not an http(s) URL such as http://ceph:7480")
    try:
        parsed.port  # noqa: B018  # reading it is what checks it
    except ValueError:
        raise BlobSettingError(f"{setting} has a port that is not a TCP port number") from None


def _status_and_code(error: Exception) -> tuple[int | None, str]:
    """The HTTP status and S3 error code of a botocore ClientError; (None, "") otherwise."""
    response: Any = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None, ""
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = response.get("Error", {}).get("Code", "")
    return (int(status) if status is not None else None), str(code or "")
