"""What a kernel's own capture must be before it becomes a checkpoint, without a kernel.

The capture names its runtime in the manifest's signed body; RuntimeService takes a
precaptured manifest only when it is a kernel-namespace manifest of its blob store captured
for that runtime, and refuses before any provider work; a server's runtime tokens tell a
runtime's own kernel from anyone else. (The same rules through a real server and real
kernels: tests/server/test_self_routes.py.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import ContextCapture
from ditto_jupyter.kernel.capture import capture_namespace, restore_namespace
from ditto_jupyter.server.runtime_tokens import RuntimeTokens
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    yield svc
    svc.close_store()


def test_the_signed_body_names_the_runtime_and_old_manifests_still_restore(
    service: RuntimeService,
) -> None:
    blobs = service.blobs
    namespace: dict[str, object] = {"__name__": "__main__", "x": [1, 2]}
    named = capture_namespace(namespace, blobs, runtime_id="r1")
    body = blobs.get_manifest(named.manifest_id)
    assert (body["kind"], body["runtime_id"]) == ("kernel-namespace", "r1")
    old = capture_namespace(namespace, blobs)  # as written before manifests named a runtime
    assert "runtime_id" not in blobs.get_manifest(old.manifest_id)
    for manifest_id in (named.manifest_id, old.manifest_id):
        fresh: dict[str, object] = {"__name__": "__main__"}
        assert restore_namespace(fresh, blobs, manifest_id) == []
        assert fresh["x"] == [1, 2]


def test_service_takes_only_this_runtimes_kernel_namespace_capture(
    service: RuntimeService,
) -> None:
    async def scenario() -> None:
        a = (await service.create_runtime("a.ipynb")).runtime_id
        b = (await service.create_runtime("b.ipynb")).runtime_id
        namespace: dict[str, object] = {"__name__": "__main__", "x": 1}
        own = capture_namespace(namespace, service.blobs, runtime_id=a)
        other = capture_namespace(namespace, service.blobs, runtime_id=b)
        old = capture_namespace(namespace, service.blobs)
        workspace = await service.checkpoint(a)  # the fake context's manifest is not a kernel's
        memory_manifest = service.get_checkpoint(workspace.checkpoint_id).context_manifest_id
        assert memory_manifest is not None
        refused = [
            (other, f"captured for runtime {b}, not for runtime {a}"),
            (old, "captured for no runtime"),
            (ContextCapture(manifest_id=memory_manifest), "'memory-context' manifest"),
            (ContextCapture(manifest_id="f" * 64), "not a valid manifest"),
        ]
        for capture, reason in refused:
            for operation in (service.checkpoint, service.pause):
                with pytest.raises(InvalidRequest, match=reason):
                    await operation(a, precaptured=capture)
        assert [c.checkpoint_id for c in service.store.list_checkpoints(a)] == [
            workspace.checkpoint_id
        ]
        assert (await service.get_runtime(a)).status.value == "idle"  # the pause stopped nothing
        result = await service.pause(a, precaptured=own)
        assert result.runtime.status.value == "paused"

    asyncio.run(scenario())


def test_capture_counts_are_never_negative() -> None:
    for field in ("bytes_written", "execution_count"):
        with pytest.raises(ValidationError, match=field):
            ContextCapture.model_validate({"manifest_id": "m", field: -1})
    assert ContextCapture(manifest_id="m", bytes_written=0, execution_count=0).bytes_written == 0


def test_runtime_tokens_tell_a_runtimes_own_kernel_from_anyone_else() -> None:
    tokens = RuntimeTokens()
    env = tokens.kernel_env("r1")
    assert env["DITTO_RUNTIME_ID"] == "r1"
    tokens.check("r1", env["DITTO_RUNTIME_TOKEN"])
    for wrong in ("", tokens.token("r2"), RuntimeTokens().token("r1"), "\u00e9" * 64):
        with pytest.raises(InvalidRequest, match="runtime_token is not runtime r1's"):
            tokens.check("r1", wrong)
