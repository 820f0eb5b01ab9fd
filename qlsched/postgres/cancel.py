"""Cancel a Run as the admin role (docs/contract.md §13), audited like every control action.

One transaction: lock the Run, act on its state, append the ``schedule_actions`` row (kind
``cancel``, the Run in ``detail``). A queued Run is cancelled at once with its pristine
Attempt (no worker can claim it: the claim skips a locked Run and needs ``queued``); a
running one gets ``cancel_requested``, which its worker sees at the next heartbeat, stops the
job and finishes the Run ``cancelled``. A finished Run, or one already asked, changes nothing
and records nothing.
"""

from __future__ import annotations

from qlsched.core.control import TriggerRef
from qlsched.core.work import (
    AlreadyFinished,
    CancelledQueued,
    CancelOutcome,
    CancelRequested,
    UnknownRun,
)
from qlsched.postgres.control import record_action
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query


async def cancel_run(
    conn: Connection, run_id: str, *, note: str | None, actor: str | None
) -> CancelOutcome:
    """Cancel ``run_id`` (a checked UUID text); ``note`` and ``actor`` are already checked."""
    async with conn.transaction():
        row = await conn.fetchrow(query("cancel_lock_run"), run_id)
        if row is None:
            return UnknownRun(run_id=run_id)
        state = str(row["state"])
        ref = TriggerRef(row["project_id"], row["trigger_id"])
        who = actor or "admin"
        if state in ("queued", "held"):
            await conn.execute(query("cancel_queued"), run_id, who)
        elif state == "running" and not row["cancel_requested"]:
            await conn.execute(query("cancel_request_running"), run_id, who)
        else:
            shown = "cancel_requested" if state == "running" else state
            return AlreadyFinished(run_id=run_id, state=shown)
        action_id, _ = await record_action(
            conn,
            ref,
            revision=int(row["trigger_revision"]),
            kind="cancel",
            note=note,
            actor=actor,
            detail={"run_id": run_id, "state": state},
        )
    if state in ("queued", "held"):
        return CancelledQueued(run_id=run_id, action_id=action_id)
    return CancelRequested(run_id=run_id, action_id=action_id)
