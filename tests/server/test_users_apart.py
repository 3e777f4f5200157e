"""Each user sees only their own (issue 24 section 3): two users, two real Jupyter servers,
one PostgreSQL store.

Alice's server and Bob's server share the store, each with its own data directory, as two
hub users' servers on two nodes do. Bob, on his server, gets from every route about
Alice's runtime and checkpoints exactly what he gets about ids that do not exist: the
same 404, word for word; a copied checkpoint id, its prefix or its name gives nothing
away, and none of his operations touches her runtime. Bob reaching Alice's server itself
(with a token that names him, as a hub admin's does) sees none of her work either. Alice
meanwhile keeps everything: her runtime, its checkpoints and her variables.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.live_server import LiveServer

pytest_plugins = ["tests.support.postgres_fixtures"]
pytestmark = [pytest.mark.postgres, pytest.mark.slow]  # two jupyter servers and kernels

#: An id no runtime or checkpoint has: what "does not exist" answers.
NOBODY = "0" * 32

BOB_ON_ALICES_SERVER = secrets.token_hex(16)


@pytest.fixture
def servers(tmp_path: Path, postgres_url: str) -> Iterator[tuple[LiveServer, LiveServer]]:
    """Alice's server (it also knows a token naming Bob) and Bob's, on one store."""
    alice_token = secrets.token_hex(16)
    named = {
        "ServerApp": {
            "identity_provider_class": "tests.fakes.named_tokens.NamedTokensIdentityProvider"
        },
        "NamedTokensIdentityProvider": {
            "users": {alice_token: "alice", BOB_ON_ALICES_SERVER: "bob"}
        },
    }
    store = {"DittoJupyterApp": {"store_url": postgres_url, "kernel_pool_size": 0}}
    alice = LiveServer(
        tmp_path / "alice",
        token=alice_token,
        config={**named, **store},
        environment={"JUPYTERHUB_USER": "alice"},
    )
    bob = LiveServer(tmp_path / "bob", config=store, environment={"JUPYTERHUB_USER": "bob"})
    with alice, bob:
        yield alice, bob


def unknown(answer: tuple[int, Any], own_id: str) -> tuple[int, Any]:
    """An answer about `own_id` written as the answer about NOBODY would be."""
    status, body = answer
    if isinstance(body, dict) and "message" in body:
        body = {**body, "message": body["message"].replace(own_id, NOBODY)}
    return status, body


def same_as_nothing(server: LiveServer, method: str, route: str, body: Any, hidden: str) -> None:
    """`route` about the hidden id answers exactly what it answers about NOBODY."""
    token = BOB_ON_ALICES_SERVER if server.environment["JUPYTERHUB_USER"] == "alice" else None

    def ask(the_id: str) -> tuple[int, Any]:
        filled = {k: (the_id if v == hidden else v) for k, v in (body or {}).items()} or None
        return server.api(method, route.replace(hidden, the_id), filled, token=token)

    about_it, about_nothing = ask(hidden), ask(NOBODY)
    assert about_it[0] == 404, (route, about_it)
    assert unknown(about_it, hidden) == about_nothing, (route, about_it, about_nothing)


def test_a_user_sees_nothing_of_another_users_runtimes_and_checkpoints(
    servers: tuple[LiveServer, LiveServer],
) -> None:
    alice, bob = servers
    notebook = alice.open_notebook("private.ipynb")
    rid, kernel = notebook["id"], notebook["kernel"]["id"]
    alice.execute(
        kernel,
        "secret = 'alice only'\nimport ditto_jupyter\n"
        "(ditto_jupyter.workspace() / 'diary.txt').write_text('dear diary')",
    )
    status, taken = alice.api("POST", "checkpoint", {"runtime_id": rid, "name": "mine"})
    assert status == 200, taken
    cid = taken["checkpoint_id"]

    own = bob.open_notebook("bobs.ipynb")
    status, bobs = bob.api("POST", "checkpoint", {"runtime_id": own["id"], "name": "mine"})
    assert status == 200, bobs

    for server in (bob, alice):  # Bob on his server, then Bob on Alice's
        token = BOB_ON_ALICES_SERVER if server is alice else None
        status, listing = server.api("GET", "", token=token)
        assert status == 200, listing
        assert rid not in {r["runtime_id"] for r in listing["runtimes"]}
        for route in (
            rid,
            f"{rid}/checkpoints",
            f"{rid}/lineage",
            f"{rid}/workspace",
            f"{rid}/budget",
            f"{rid}/checkpoints/{cid}",
            f"{rid}/checkpoints/mine",
            f"{rid}/checkpoints/{cid}/document",
            f"{rid}/checkpoints/{cid}/contents",
        ):
            same_as_nothing(server, "GET", route, None, rid)
        for route in (f"checkpoints/{cid}", f"checkpoints/{cid[:10]}"):
            hidden = route.rsplit("/", 1)[1]
            same_as_nothing(server, "GET", route, None, hidden)
        for route, body in (
            ("checkpoint", {"runtime_id": rid}),
            ("pause", {"runtime_id": rid}),
            ("resume", {"runtime_id": rid}),
            ("close", {"runtime_id": rid}),
            ("undo", {"runtime_id": rid}),
            ("restore", {"runtime_id": rid, "checkpoint_id": "mine"}),
            ("exec", {"runtime_id": rid, "command": "cat diary.txt"}),
        ):
            same_as_nothing(server, "POST", route, body, rid)
        empty = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
        for route, body in (
            ("checkout", {"checkpoint_id": cid}),
            ("checkpoint/delete-snapshot", {"checkpoint_id": cid}),
            # her checkpoint's document answered from his own runtime (issue 40 section 7)
            (
                "checkpoint/document",
                {"runtime_id": own["id"], "checkpoint_id": cid, "document": empty},
            ),
        ):
            same_as_nothing(server, "POST", route, body, cid)

    # Bob's own name is his own checkpoint, never ambiguous with Alice's of the same name.
    status, found = bob.api("GET", "checkpoints/mine")
    assert status == 200, found
    assert found["checkpoint"]["checkpoint_id"] == bobs["checkpoint_id"]
    # A comparison of his runtime with her checkpoint compares with nothing.
    status, compared = bob.api("POST", "diff", {"runtime_id": own["id"], "from": cid})
    assert (status, compared["error"]) == (404, "CheckpointNotFound"), compared

    # From his kernel's magic (a self/ route), her checkpoint is as unknown.
    def checkout_magic(reference: str) -> str:
        cell = (
            "import sys\nsys.stderr = sys.stdout\n"
            f"%checkout {reference}\nsys.stderr = sys.__stderr__"
        )
        return bob.execute(own["kernel"]["id"], cell).replace(reference, NOBODY)

    out = checkout_magic(cid)
    assert "CheckpointNotFound" in out and out == checkout_magic(NOBODY), out

    # Alice lost nothing: her runtime is live, her checkpoint listed, her variable there.
    status, record = alice.api("GET", rid)
    assert (status, record["status"]) == (200, "idle"), record
    status, listing = alice.api("GET", f"{rid}/checkpoints")
    assert [c["checkpoint_id"] for c in listing["checkpoints"]] == [cid]
    assert alice.execute(kernel, "print(secret)").strip() == "alice only"
    status, mine = alice.api("GET", "")
    assert {r["runtime_id"] for r in mine["runtimes"]} == {rid}


def lease_expiry(store_url: str, runtime_id: str) -> int:
    """When the lease of a runtime runs out, as the shared store says (0: no lease)."""
    import sqlalchemy as sa

    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT expires_at_ms FROM leases WHERE key = :key"), {"key": runtime_id}
            ).scalar()
    finally:
        engine.dispose()
    return int(found or 0)


def session_status(store_url: str, runtime_id: str) -> str:
    """A runtime's status, as the shared store says."""
    import sqlalchemy as sa

    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT status FROM sessions WHERE runtime_id = :rid"), {"rid": runtime_id}
            ).scalar()
    finally:
        engine.dispose()
    return str(found)


def test_a_dead_users_runtime_waits_for_that_users_next_server(
    tmp_path: Path, postgres_url: str
) -> None:
    """Alice's server dies with a live runtime: Bob's server, on the same store, leaves it
    alone round after round; Alice's next server takes it over, and resumes it."""
    store = {"DittoJupyterApp": {"store_url": postgres_url, "kernel_pool_size": 0}}
    quick = {"DittoJupyterApp": {**store["DittoJupyterApp"], "lease_ttl": 3.0}}  # rounds of 1 s
    alice = LiveServer(tmp_path / "alice", config=store, environment={"JUPYTERHUB_USER": "alice"})
    bob = LiveServer(tmp_path / "bob", config=quick, environment={"JUPYTERHUB_USER": "bob"})
    with bob:
        own = bob.open_notebook("bobs.ipynb")["id"]
        with alice:
            notebook = alice.open_notebook("alices.ipynb")
            rid = notebook["id"]
            alice.execute(notebook["kernel"]["id"], "kept = 'by alice'")
            status, taken = alice.api("POST", "checkpoint", {"runtime_id": rid})
            assert status == 200, taken
            alice.kill()
        # Bob's watcher renews his lease at every round: two renewals after Alice's death
        # mean at least one whole round looked at her lapsed lease.
        seen = [lease_expiry(postgres_url, own)]
        while len(set(seen)) < 3:
            time.sleep(0.3)
            seen.append(lease_expiry(postgres_url, own))
        assert session_status(postgres_url, rid) == "idle"  # still Alice's live runtime
        with LiveServer(
            tmp_path / "alice-again",
            config=store,
            data_dir=alice.data_dir,
            environment={"JUPYTERHUB_USER": "alice"},
        ) as again:
            status, record = again.api("GET", rid)
            assert status == 200, record
            deadline = time.monotonic() + 120.0  # a hang guard only
            while record["status"] != "paused" and time.monotonic() < deadline:
                time.sleep(0.2)
                record = again.api("GET", rid)[1]
            assert record["status"] == "paused", record
            status, back = again.api("POST", "resume", {"runtime_id": rid})
            assert status == 200, back
            assert again.execute(back["kernel_id"], "print(kept)").strip() == "by alice"
    assert "taking it over" not in bob.log_path.read_text()
    assert "taking it over" in (tmp_path / "alice-again" / "server.log").read_text()
