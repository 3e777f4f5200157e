"""`GET /api/v1/runtimes/retention`: the retention's settings and its last thinning.

What a user is shown of the last thinning is their own runtimes' part of it (on a shared
store another user's runtime is never named, as everywhere else: `user_scope`); the bytes
are the data directory's, which is this server's. The answer is in memory: it makes one
owner lookup per runtime the thinning took from, on the store's threads.
"""

from __future__ import annotations

from ditto_jupyter.core.models import RetentionReport, RetentionStatus
from ditto_jupyter.server.route_spec import API_PREFIX, RouteRequest, RouteSpec
from ditto_jupyter.server.sessions import RuntimeSessions


async def _owned(sessions: RuntimeSessions, user: str, runtime_ids: list[str]) -> set[str]:
    owners = {rid: await sessions.scope.owner_of(rid) for rid in dict.fromkeys(runtime_ids)}
    return {rid for rid, owner in owners.items() if owner == user}


async def _users_part(
    sessions: RuntimeSessions, report: RetentionReport, user: str
) -> RetentionReport:
    """The report with only `user`'s runtimes in it."""
    mine = await _owned(sessions, user, [r.runtime_id for r in report.runtimes] + list(report.busy))
    runtimes = [r for r in report.runtimes if r.runtime_id in mine]
    return report.model_copy(
        update={
            "runtimes": runtimes,
            "thinned": sum(r.checkpoints for r in runtimes),
            "busy": [rid for rid in report.busy if rid in mine],
        }
    )


async def retention_status(sessions: RuntimeSessions, req: RouteRequest[None]) -> RetentionStatus:
    """The settings, when the last round ran, and the last thinning (the user's part)."""
    retention = sessions.service.retention
    last = retention.last
    if last is not None:
        last = await _users_part(sessions, last, req.user)
    return RetentionStatus(
        tiers=retention.tiers,
        budget_bytes=retention.budget_bytes,
        interval_seconds=retention.interval_seconds,
        last_round_at_ms=retention.last_round_at_ms,
        last=last,
    )


RETENTION_ROUTES = (
    RouteSpec[None](
        "GET",
        f"{API_PREFIX}/retention",
        "Get the retention settings and the last thinning of automatic checkpoints",
        "get_retention",
        None,
        RetentionStatus,
        (),
        retention_status,
    ),
)
