"""Reading a kernel-namespace manifest without unpickling anything: its variables as the
kernel described them at capture time.

The kernel writes the manifest (`ditto_jupyter.kernel.capture`, which documents the whole
format). Each component (one pickle stream of alias-connected variables) lists its
variables' `names` and `types` and, since checkpoints hold notebooks too, their `summaries`
(a short description made in the kernel) and `digests` (a hash of the component's chunk
names: equal digests, equal pickled bytes). A manifest of a larger namespace keeps its
components in signed parts. The control plane reads all this to list and compare
variables; it never loads a pickle.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from ditto_jupyter.core.blobs import NAMESPACE_MANIFEST_KIND, BlobError, BlobStore

#: The `kind` of a part of a kernel-namespace manifest (a signed child manifest).
NAMESPACE_PART_KIND = "kernel-namespace-part"
#: The version of the kernel-namespace format these readers know.
NAMESPACE_VERSION = 1
#: The pseudo-variable under which pyplot's open figures are stored (not a user's name).
PYPLOT_FIGURES_NAME = "<pyplot figures>"
#: The start of a pod's component name: one open pyplot figure pickled in a stream of its
#: own (`<pyplot figure 3>`), which the variables that reach it refer into (`pods`).
POD_NAME_PREFIX = "<pyplot figure "


def component_digest(component: dict[str, Any]) -> str:
    """A digest of a component's stored bytes, from its chunk names (BLAKE3 hashes): the
    stream's and each out-of-band buffer's, with their kinds and sizes."""
    stream = component["stream"]
    document = [
        stream["size"],
        stream["chunks"],
        [[b.get("kind"), b.get("readonly"), b["size"], b["chunks"]] for b in component["buffers"]],
    ]
    return hashlib.blake2b(orjson.dumps(document), digest_size=16).hexdigest()


def component_size(component: dict[str, Any]) -> int:
    """Bytes of a component's pickle: its stream and its out-of-band buffers."""
    return int(component["stream"]["size"]) + sum(int(b["size"]) for b in component["buffers"])


@dataclass(frozen=True)
class RecordedVariable:
    """One variable as a namespace manifest records it."""

    name: str
    type: str
    summary: str
    size: int | None
    digest: str | None
    kept: bool
    reason: str | None = None


#: Parts read (signature checked) and kept: a part's id is the hash of its content, so a
#: part two checkpoints share is read once (and, in a server, once for many comparisons).
PART_CACHE = 4096
_parts: dict[tuple[str, str], list[dict[str, Any]]] = {}


def _part_components(blobs: BlobStore, part_id: str, manifest_id: str) -> list[dict[str, Any]]:
    key = (str(blobs.root), part_id)
    found = _parts.get(key)
    if found is None:
        part = blobs.get_manifest(part_id)
        if part.get("kind") != NAMESPACE_PART_KIND:
            raise BlobError(f"manifest {part_id} is not a part of kernel-namespace {manifest_id}")
        found = part["components"]
        if len(_parts) >= PART_CACHE:
            _parts.clear()
        _parts[key] = found
    return found


def forget_parts() -> None:
    """Drop the parts read so far (what a process that just started holds: none)."""
    _parts.clear()


def load_namespace(blobs: BlobStore, manifest_id: str) -> dict[str, Any]:
    """A kernel-namespace manifest with its parts' components in `"components"` (every
    signature checked when it is read); BlobError when it is not one. What it returns is
    shared with later readers: never change it."""
    body = blobs.get_manifest(manifest_id)
    if body.get("kind") != NAMESPACE_MANIFEST_KIND or body.get("version") != NAMESPACE_VERSION:
        raise BlobError(f"manifest {manifest_id} is not a kernel-namespace manifest")
    part_ids = body.get("parts") or []
    if not part_ids:
        return body
    components = list(body.get("components", []))
    for part_id in part_ids:
        components.extend(_part_components(blobs, part_id, manifest_id))
    return {**body, "components": components}


def _with_pods(digest: str, used: list[str], pods: dict[str, str]) -> str:
    """A variable's digest with those of the figures it refers into (a figure drawn on
    changes its pod, not the stream of the variable that holds it)."""
    if not used:
        return digest
    document = [digest, *(pods.get(name, name) for name in sorted(used))]
    return hashlib.blake2b(orjson.dumps(document), digest_size=16).hexdigest()


def recorded_variables(body: dict[str, Any]) -> dict[str, RecordedVariable]:
    """Every variable of a loaded namespace manifest, by name: the pickled ones (described
    by the kernel; a manifest from before summaries has none, and its digests are computed
    here from the chunk names), the modules (recorded as imports) and the ones the
    checkpoint could not keep."""
    found: dict[str, RecordedVariable] = {}
    listed = body.get("components", [])
    pods = {
        name: component_digest(component)
        for component in listed
        if component.get("pod")
        for name in component["names"]
    }
    for component in listed:
        if component.get("pod"):  # a figure's own stream, not a variable
            continue
        summaries = component.get("summaries") or {}
        digests = component.get("digests") or {}
        types = component.get("types") or {}
        size = component_size(component)
        fallback: str | None = None
        for name in component["names"]:
            if name == PYPLOT_FIGURES_NAME:
                continue
            digest = digests.get(name)
            if digest is None:
                fallback = fallback or component_digest(component)
                digest = fallback
            digest = _with_pods(str(digest), component.get("pods") or [], pods)
            found[name] = RecordedVariable(
                name=name,
                type=str(types.get(name, "")),
                summary=str(summaries.get(name, "")),
                size=size,
                digest=str(digest),
                kept=True,
            )
    for name, module in (body.get("modules") or {}).items():
        found[name] = RecordedVariable(
            name=name,
            type="module",
            summary=f"import {module}",
            size=None,
            digest=f"module:{module}",
            kept=True,
        )
    for entry in body.get("unrestorable") or []:
        name = str(entry.get("name", ""))
        found[name] = RecordedVariable(
            name=name,
            type=str(entry.get("type", "")),
            summary="",
            size=None,
            digest=None,
            kept=False,
            reason=str(entry.get("reason", "")),
        )
    return found
