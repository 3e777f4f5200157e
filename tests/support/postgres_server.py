"""A real PostgreSQL server for tests, started from Debian's binaries (`make postgresql`).

The server runs from a temporary directory on 127.0.0.1 (as the `postgres` user when the
tests run as root: PostgreSQL refuses to run as root), with trust authentication and no
fsync. `running_postgres()` yields the URL of its server (no database); `new_database`
makes an empty database on it and answers its URL. `pg_missing()` says why there can be
none here (binaries, driver, user), or "" when there can.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path


def pg_bindir() -> Path | None:
    """The directory holding initdb and pg_ctl, newest version first; None without."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    found = shutil.which("initdb")
    if found:
        candidates.insert(0, found)
    for initdb in candidates:
        bindir = Path(initdb).parent
        if (bindir / "pg_ctl").exists():
            return bindir
    return None


def pg_missing() -> str:
    """Why no PostgreSQL server can run here ("" when one can)."""
    if pg_bindir() is None:
        return "PostgreSQL server binaries (initdb, pg_ctl) are not installed: make postgresql"
    if find_spec("psycopg") is None:
        return "psycopg (the PostgreSQL driver) is not installed"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    return ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_postgres(port: int | None = None) -> Iterator[str]:
    """A PostgreSQL server until the block ends (on `port`, else a free one); yields its
    URL (append `/DBNAME`)."""
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError(pg_missing())
    run_as: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix="ditto-pg-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
        os.chown(workdir, owner.pw_uid, owner.pw_gid)
    data, log, port = workdir / "data", workdir / "server.log", port or _free_port()
    initdb = [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "ditto"]
    options = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = [str(bindir / "pg_ctl"), "-D", str(data)]
    try:
        made = subprocess.run(
            [*run_as, *initdb, "-E", "UTF8", "--no-sync"], capture_output=True, text=True
        )
        if made.returncode != 0:
            raise RuntimeError(f"initdb failed: {made.stderr.strip()}")
        started = subprocess.run(
            [*run_as, *pg_ctl, "-o", options, "-l", str(log), "-w", "start"],
            capture_output=True,
            text=True,
        )
        if started.returncode != 0:
            detail = log.read_text() if log.exists() else started.stderr
            raise RuntimeError(f"PostgreSQL did not start: {detail}")
        yield f"postgresql+psycopg://ditto@127.0.0.1:{port}"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*run_as, *pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)


def new_database(server_url: str) -> str:
    """A new, empty database on the server at `server_url`; its URL."""
    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(f"{server_url}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    return f"{server_url}/{name}"


def password_login(server_url: str, database: str) -> tuple[str, str]:
    """A new login role on the server at `server_url` that must give its password over TCP
    (the server trusts every other login), owning `database`: its name and password. The
    role's line goes first in the server's pg_hba.conf, which is reloaded."""
    import secrets

    import sqlalchemy as sa

    role, password = f"pw_{uuid.uuid4().hex[:10]}", secrets.token_hex(12)
    admin = sa.create_engine(f"{server_url}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
        conn.exec_driver_sql(f'ALTER DATABASE "{database}" OWNER TO "{role}"')
        hba = Path(str(conn.exec_driver_sql("SHOW hba_file").scalar_one()))
        rule = f"host all {role} 127.0.0.1/32 scram-sha-256\n"
        with hba.open("r+", encoding="utf-8") as handle:  # keeps the file's owner
            rules = handle.read()
            handle.seek(0)
            handle.write(rule + rules)
        conn.exec_driver_sql("SELECT pg_reload_conf()")
    admin.dispose()
    host = server_url.split("@", 1)[1]
    deadline = time.monotonic() + 60
    while True:  # the reload is asynchronous: wait until a wrong password is refused
        wrong = sa.create_engine(f"postgresql+psycopg://{role}:wrong@{host}/postgres")
        try:
            with wrong.connect():
                pass
        except sa.exc.OperationalError as error:
            if "password authentication failed" in str(error):
                return role, password
            raise
        finally:
            wrong.dispose()
        if time.monotonic() > deadline:
            raise RuntimeError(f"PostgreSQL still trusts {role} without its password")
        time.sleep(0.05)
