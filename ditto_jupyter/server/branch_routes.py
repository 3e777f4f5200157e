"""The routes of a fan-out seen as one exploration (issue 44 §3): compare 2 to 8 points in
time side by side (`compare`), and keep one child of a fan-out, closing the others
(`{runtime_id}/keep`). Each talks to the session mapping's `branches` only.
"""

from __future__ import annotations

from typing import Any

from ditto_jupyter.core.models import (
    RuntimeCompareRequest,
    RuntimeCompareResult,
    RuntimeKeepRequest,
    RuntimeKeepResult,
)
from ditto_jupyter.server.route_spec import API_PREFIX, OPERATION_ERRORS, RouteSpec

#: The routes of this module, in the order of the OpenAPI document.
BRANCH_ROUTES: tuple[RouteSpec[Any], ...] = (
    RouteSpec(
        "POST",
        f"{API_PREFIX}/compare",
        "Compare 2 to 8 checkpoints or live runtimes side by side",
        "compare_side_by_side",
        RuntimeCompareRequest,
        RuntimeCompareResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.branches.compare(req.body.sides, req.user),
    ),
    RouteSpec(
        "POST",
        f"{API_PREFIX}/{{runtime_id}}/keep",
        "Keep one child of a fan-out and close the others",
        "keep_a_fan_out_child",
        RuntimeKeepRequest,
        RuntimeKeepResult,
        OPERATION_ERRORS,
        lambda sessions, req: sessions.branches.keep(req.path["runtime_id"], req.user),
    ),
)
