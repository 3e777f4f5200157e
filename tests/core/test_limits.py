"""Request limits (issue 10 section 3): whatever is accepted is stored and read back equal.

The request models refuse anything over a limit of `core.limits` with a message naming
it; the hypothesis tests generate requests on both sides of every limit, send the accepted
ones through RuntimeService onto a real SQLite file, and read them back from a fresh store.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ditto_jupyter.control.store import SqlCheckpointStore
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.limits import (
    MAX_ID_LENGTH,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_METADATA_KEY_LENGTH,
    MAX_METADATA_KEYS,
    MAX_METADATA_VALUE_BYTES,
    MAX_NAME_LENGTH,
    metadata_problem,
)
from ditto_jupyter.core.models import (
    RuntimeCheckoutRequest,
    RuntimeCheckpointRequest,
    RuntimeResumeRequest,
    SessionRecord,
)
from ditto_jupyter.server.handlers import parse_body
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture


def nested(depth: int, leaf: Any = 1) -> dict[str, Any]:
    """A metadata object `depth` levels deep, alternating objects and arrays inside."""
    value = leaf
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    return {"k": value}


# ---- the limits themselves --------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (nested(MAX_METADATA_DEPTH + 1), "metadata is nested 33 deep; the limit is 32"),
        (nested(200), "metadata is nested 200 deep; the limit is 32"),
        ({str(i): i for i in range(129)}, "metadata has 129 keys; the limit is 128"),
        ({"k" * 257: 1}, "is 257 characters long; the limit is 256"),
        ({"v": "é" * 8192}, "metadata value 'v' is 16386 bytes as JSON; the limit is 16384"),
        (
            {str(i): "x" * 16000 for i in range(5)},
            f"bytes as JSON; the limit is {MAX_METADATA_BYTES}",
        ),
        ({"n": float("inf")}, "metadata holds the number inf, which JSON cannot hold"),
        ({"n": {1: "a"}}, "metadata holds the key 1, which is not a string"),
        ({"s": "\ud800"}, "metadata holds a string that is not valid Unicode"),
        ({"o": {1, 2}}, "metadata is not JSON"),
    ],
)
def test_each_metadata_limit_is_named(metadata: dict[str, Any], message: str) -> None:
    problem = metadata_problem(metadata)
    assert problem is not None and message in problem


def test_metadata_at_every_limit_fits() -> None:
    assert metadata_problem(nested(MAX_METADATA_DEPTH)) is None
    assert metadata_problem({str(i): i for i in range(MAX_METADATA_KEYS)}) is None
    assert metadata_problem({"k" * MAX_METADATA_KEY_LENGTH: 1}) is None
    assert metadata_problem({"v": "x" * (MAX_METADATA_VALUE_BYTES - 2)}) is None
    four = {str(i): "x" * (MAX_METADATA_VALUE_BYTES - 2) for i in range(3)}
    assert metadata_problem(four) is None


def test_request_ids_and_names_have_limits() -> None:
    for body in (
        {"runtime_id": ""},
        {"runtime_id": "r" * (MAX_ID_LENGTH + 1)},
        {"runtime_id": "r", "name": "n" * (MAX_NAME_LENGTH + 1)},
    ):
        with pytest.raises(InvalidRequest, match=r"should have at (least 1|most \d+) char"):
            parse_body(json.dumps(body).encode(), RuntimeCheckpointRequest)
    accepted = parse_body(
        json.dumps({"runtime_id": "r" * MAX_ID_LENGTH, "name": "n" * MAX_NAME_LENGTH}).encode(),
        RuntimeCheckpointRequest,
    )
    assert len(accepted.runtime_id) == MAX_ID_LENGTH


def test_numbers_beyond_a_float_are_refused_at_parse() -> None:
    with pytest.raises(InvalidRequest, match="the number 1e400 is too large for a float"):
        parse_body(b'{"runtime_id": "r", "metadata": {"n": 1e400}}', RuntimeCheckpointRequest)


# ---- accepted means stored and read back equal ---------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_deep = st.builds(
    nested, st.sampled_from([1, 2, MAX_METADATA_DEPTH, MAX_METADATA_DEPTH + 1, 200, 300]), _scalars
)
_wide = st.integers(MAX_METADATA_KEYS - 2, MAX_METADATA_KEYS + 2).map(
    lambda n: {f"key-{i:04d}": i for i in range(n)}
)
_long_key = st.integers(MAX_METADATA_KEY_LENGTH - 1, MAX_METADATA_KEY_LENGTH + 1).map(
    lambda n: {"ü" * n: "v"}
)
_big_value = st.integers(MAX_METADATA_VALUE_BYTES // 2 - 3, MAX_METADATA_VALUE_BYTES // 2).map(
    lambda n: {"big": "é" * n}  # two bytes a character: right at the value limit
)
_big_total = st.integers(MAX_METADATA_BYTES // 16 - 40, MAX_METADATA_BYTES // 16 + 40).map(
    lambda n: {f"k{i}": "x" * (n * 4) for i in range(4)}
)
_metadata = st.one_of(
    st.dictionaries(st.text(max_size=20), _json, max_size=6),
    _deep,
    _wide,
    _long_key,
    _big_value,
    _big_total,
)
_names = st.one_of(
    st.none(),
    st.text(max_size=8),
    st.integers(MAX_NAME_LENGTH - 1, MAX_NAME_LENGTH + 1).map("ñ".__mul__),
)
_texts = st.one_of(
    st.none(),
    st.text(min_size=1, max_size=30),
    st.integers(MAX_ID_LENGTH - 1, MAX_ID_LENGTH + 1).map("p".__mul__),
)


def _accepted(body: dict[str, Any], model: type[Any]) -> Any:
    """The request `body` as `model` when it is within every limit, else None (and then the
    refusal names a limit)."""
    try:
        return parse_body(json.dumps(body).encode(), model)
    except InvalidRequest as error:
        assert "the limit is" in str(error) or "at most" in str(error), str(error)
        return None


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(metadata=_metadata, name=_names, conversation=_texts, sender=_texts)
@example(metadata=nested(200), name=None, conversation=None, sender=None)  # the probe's
@example(metadata={}, name="n" * (10 * 1024 * 1024), conversation=None, sender=None)
def test_accepted_requests_are_stored_and_read_back_equal(
    tmp_path: Path,
    metadata: dict[str, Any],
    name: str | None,
    conversation: str | None,
    sender: str | None,
) -> None:
    data = tmp_path / uuid.uuid4().hex  # a new data directory for each example
    service = open_runtime_service(data, context_factory=InMemoryContextCapture)
    try:
        rid = asyncio.run(service.create_runtime("nb.ipynb")).runtime_id
        checkpoint = _accepted(
            {"runtime_id": rid, "name": name, "metadata": metadata}, RuntimeCheckpointRequest
        )
        if checkpoint is None:
            assert metadata_problem(metadata) is not None or len(name or "") > MAX_NAME_LENGTH
            return
        made = asyncio.run(service.checkpoint(rid, checkpoint.name, checkpoint.metadata))
        cid = made.checkpoint_id
        checkout = _accepted(
            {
                "checkpoint_id": cid,
                "conversation_id": conversation,
                "sender_id": sender,
                "metadata": metadata,
            },
            RuntimeCheckoutRequest,
        )
        child = None
        if checkout is not None:
            child = asyncio.run(
                service.checkout(cid, checkout.conversation_id, checkout.sender_id, metadata)
            ).runtime.runtime_id
        asyncio.run(service.pause(rid))
        resume = _accepted({"runtime_id": rid, "metadata": metadata}, RuntimeResumeRequest)
        assert resume is not None  # the checkpoint's metadata was accepted: so is this
        asyncio.run(service.resume(rid, resume.metadata))
    finally:
        service.close_store()

    fresh = SqlCheckpointStore.at_path(data / "ditto.db")
    try:
        stored = fresh.get_checkpoint(cid)
        assert stored is not None
        assert (stored.name, stored.metadata) == (checkpoint.name, checkpoint.metadata)
        assert fresh.list_checkpoints(rid)[0].summary() == stored.summary()
        resumed = fresh.get_session(rid)
        assert resumed is not None and resumed.metadata == metadata
        if child is not None:
            assert checkout is not None
            record = fresh.get_session(child)
            assert isinstance(record, SessionRecord)
            assert record.metadata == metadata
            assert record.conversation_id == (checkout.conversation_id or "nb.ipynb")
        assert fresh.damaged_rows() == []
    finally:
        fresh.close()


def test_the_service_holds_in_process_callers_and_merges_to_the_limits(tmp_path: Path) -> None:
    service = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    try:
        half = {f"a{i}": i for i in range(MAX_METADATA_KEYS // 2 + 1)}
        other = {f"b{i}": i for i in range(MAX_METADATA_KEYS // 2 + 1)}
        rid = asyncio.run(service.create_runtime("nb.ipynb", metadata=half)).runtime_id
        cid = asyncio.run(service.checkpoint(rid)).checkpoint_id
        with pytest.raises(InvalidRequest, match="merged with the runtime's own, metadata has"):
            asyncio.run(service.checkout(cid, metadata=other))
        assert [r.runtime_id for r in asyncio.run(service.list_runtimes()).runtimes] == [rid]
        asyncio.run(service.pause(rid))
        with pytest.raises(InvalidRequest, match=r"has 130 keys; the limit is 128"):
            asyncio.run(service.resume(rid, other))
        asyncio.run(service.resume(rid))
        with pytest.raises(InvalidRequest, match="metadata is nested 200 deep; the limit is 32"):
            asyncio.run(service.checkpoint(rid, metadata=nested(200)))
        with pytest.raises(InvalidRequest, match="name is 257 characters long; the limit is 256"):
            asyncio.run(service.checkpoint(rid, "n" * 257))
        assert len(service.store.list_checkpoints(rid)) == 2  # the first one and the pause
    finally:
        service.close_store()
