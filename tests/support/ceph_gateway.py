"""A real S3 server for the tests: Ceph's RADOS Gateway on loopback, from Debian's packages.

`CephGateway` starts one `ceph-mon`, one `ceph-osd` on memstore (the objects live in the
OSD's memory) and one `radosgw`, all on 127.0.0.1 and free ports, everything (config,
monitor and OSD data, logs, pid files, admin sockets) under one temporary directory, with
no authentication between the daemons. It creates an S3 user, makes buckets on demand,
can stop and start the gateway alone (an object store that stops answering), and stops the
three daemons by the pids in their pid files at the end. Start-up takes about 2 s here.

Its fixtures are in `ceph_fixtures` (`pytest_plugins = ["tests.support.ceph_fixtures"]`).
A machine without the binaries skips (`make radosgw` installs them; under CI=true a skip
is a failure). Debian 12 has Ceph 16.2 (pacific), whose gateway needs a monitor and an OSD:
there is no stand-alone backend in that version.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The Debian binaries the gateway needs (packages radosgw, ceph-mon, ceph-osd).
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
#: Memory the OSD may fill with objects (memstore keeps them in RAM, as they are written).
MEMSTORE_BYTES = 4 << 30
#: Seconds a daemon gets to start, or to stop before it is killed.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
#: The S3 user the tests sign their requests as.
USER_ID = "ditto-tests"


def missing_binaries() -> list[str]:
    """The gateway's binaries this machine lacks."""
    return [name for name in BINARIES if shutil.which(name) is None]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class S3Bucket:
    """One bucket of the gateway, and what a client needs to reach it."""

    name: str
    endpoint: str
    access_key: str
    secret_key: str

    @property
    def url(self) -> str:
        """The blob store URL naming this bucket (no prefix)."""
        return f"s3://{self.name}"

    def credentials_env(self, *, secret_key: str | None = None) -> dict[str, str]:
        """The environment variables that give the standard AWS chain this user's keys."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key if secret_key is not None else self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }


class CephGateway:
    """A throwaway Ceph cluster (one monitor, one memstore OSD) and its S3 gateway."""

    def __init__(self, workdir: Path, *, memstore_bytes: int = MEMSTORE_BYTES) -> None:
        self.workdir = workdir
        self.memstore_bytes = memstore_bytes
        self.mon_port = free_port()
        self.port = free_port()
        self.fsid = str(uuid.uuid4())
        self.conf = workdir / "ceph.conf"
        self.run_dir = workdir / "run"
        self.access_key = ""
        self.secret_key = ""

    @property
    def endpoint(self) -> str:
        """The gateway's S3 endpoint URL."""
        return f"http://127.0.0.1:{self.port}"

    # ---- starting ---------------------------------------------------------------------

    def _write_conf(self) -> None:
        w = self.workdir
        for folder in ("run", "log", "mon/mon.a", "osd/osd.0", "rgw"):
            (w / folder).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            textwrap.dedent(
                f"""\
                [global]
                fsid = {self.fsid}
                mon_host = [v2:127.0.0.1:{self.mon_port}]
                public_addr = 127.0.0.1
                ms_bind_ipv6 = false
                auth_cluster_required = none
                auth_service_required = none
                auth_client_required = none
                run_dir = {w}/run
                admin_socket = {w}/run/$name.asok
                log_file = {w}/log/$name.log
                pid_file = {w}/run/$name.pid
                keyring = {w}/keyring
                osd_pool_default_size = 1
                osd_pool_default_min_size = 1
                mon_allow_pool_size_one = true
                osd_pool_default_pg_num = 8
                osd_pool_default_pgp_num = 8
                osd_pool_default_pg_autoscale_mode = off
                osd_crush_chooseleaf_type = 0
                mon_data_avail_warn = 1
                mon_data_avail_crit = 0
                [mon]
                mon_data = {w}/mon/$name
                paxos_propose_interval = 0.1
                [osd]
                osd_data = {w}/osd/$name
                osd_objectstore = memstore
                memstore_device_bytes = {self.memstore_bytes}
                osd_op_num_shards = 1
                [client.admin]
                admin_socket =
                [client.rgw]
                ms_mon_client_mode = crc
                rgw_frontends = beast endpoint=127.0.0.1:{self.port} tcp_nodelay=1
                rgw_data = {w}/rgw
                """
            )
        )

    def _run(self, *argv: str, timeout: float = START_TIMEOUT_S) -> str:
        """Run a Ceph command against this cluster; its output (a failure raises)."""
        done = subprocess.run(
            [argv[0], "-c", str(self.conf), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def start(self) -> None:
        """Make the cluster, start its three daemons and create the S3 user."""
        self._write_conf()
        monmap = self.workdir / "monmap"
        subprocess.run(
            [
                "monmaptool",
                "--create",
                "--fsid",
                self.fsid,
                "--addv",
                "a",
                f"[v2:127.0.0.1:{self.mon_port}]",
                str(monmap),
            ],
            capture_output=True,
            check=True,
            timeout=START_TIMEOUT_S,
        )
        self._run("ceph-mon", "--mkfs", "-i", "a", "--monmap", str(monmap))
        self._run("ceph-mon", "-i", "a")
        osd_uuid = str(uuid.uuid4())
        self._run("ceph", "--connect-timeout", str(int(START_TIMEOUT_S)), "osd", "new", osd_uuid)
        self._run("ceph-osd", "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)
        self._run("ceph-osd", "-i", "0")
        self.start_gateway()
        user = json.loads(
            self._run("radosgw-admin", "user", "create", f"--uid={USER_ID}", "--display-name=t")
        )
        keys = user["keys"][0]
        self.access_key, self.secret_key = keys["access_key"], keys["secret_key"]

    def start_gateway(self) -> None:
        """Start radosgw (again) and wait until it answers."""
        self._run("radosgw", "-n", "client.rgw")
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(self.endpoint, timeout=2):
                    return
            except urllib.error.HTTPError:  # an S3 error answer: it is up
                return
            except OSError as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"radosgw did not answer on {self.endpoint}: {error}"
                    ) from None
                time.sleep(0.05)

    # ---- stopping ---------------------------------------------------------------------

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.run_dir / f"{name}.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _stop(self, name: str) -> None:
        """Stop one daemon by the pid in its pid file (TERM, then KILL)."""
        pid = self._pid(name)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _alive(pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / f"{name}.pid").unlink()

    def stop_gateway(self) -> None:
        """Stop radosgw alone: the endpoint stops answering (the cluster stays)."""
        self._stop("client.rgw")

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """The gateway stopped for the block, started again after it."""
        self.stop_gateway()
        try:
            yield
        finally:
            self.start_gateway()

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The gateway frozen for the block (SIGSTOP): the kernel still accepts its
        connections, and nothing answers them, as a hung gateway or a partition does.
        Thawed (SIGCONT) after the block."""
        pid = self._pid("client.rgw")
        if pid is None:
            raise RuntimeError("radosgw is not running: nothing to freeze")
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the gateway, the OSD and the monitor (by their pids)."""
        for name in ("client.rgw", "osd.0", "mon.a"):
            self._stop(name)

    # ---- using ------------------------------------------------------------------------

    def bucket(self, name: str | None = None) -> S3Bucket:
        """A new, empty bucket (created now)."""
        import boto3
        from botocore.config import Config

        name = name or f"t-{uuid.uuid4().hex[:16]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}),
        )
        client.create_bucket(Bucket=name)
        return S3Bucket(name, self.endpoint, self.access_key, self.secret_key)

    def counters(self) -> dict[str, int]:
        """The gateway's request counters: `req`, `get`, `put` (requests), `get_b`, `put_b`
        (bytes; this version counts one byte fewer than it sends for each GET of an object:
        `fetched_bytes` corrects that)."""
        asok = self.run_dir / "client.rgw.asok"
        done = subprocess.run(
            ["ceph", "--admin-daemon", str(asok), "perf", "dump"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        rgw: dict[str, Any] = json.loads(done.stdout)["rgw"]
        return {key: value for key, value in rgw.items() if isinstance(value, int)}


def fetched_bytes(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes of objects the gateway sent between two readings of `counters`."""
    return (after["get_b"] - before["get_b"]) + (after["get"] - before["get"])


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@contextlib.contextmanager
def running_gateway(*, memstore_bytes: int = MEMSTORE_BYTES) -> Iterator[CephGateway]:
    """A started `CephGateway` for the block, under a temporary directory removed after."""
    workdir = Path(tempfile.mkdtemp(prefix="ditto-ceph-"))
    gateway = CephGateway(workdir, memstore_bytes=memstore_bytes)
    try:
        gateway.start()
        yield gateway
    finally:
        gateway.stop()
        shutil.rmtree(workdir, ignore_errors=True)
