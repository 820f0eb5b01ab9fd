"""Defining a schedule in code and publishing it with the admin API (no TOML file).

    QLSCHED_ADMIN_DSN=postgresql://qlsched_admin@/qlsched?host=/run/postgresql \\
        python examples/schedule_in_code.py
    python examples/schedule_in_code.py ADMIN_DSN [--pause]

The entries are the Structs a publish file decodes to, and they are validated the same
way: an invalid one raises ``SpecError`` naming the entry and field, as ``qlsched publish``
would, and nothing is published. Running the script twice changes nothing the second time.
With ``--pause`` it then pauses the nightly report (with a note) and resumes it, printing
what each step did; ``qlsched status`` shows those actions afterwards.

A plain script uses ``qlsched.admin.sync``; a Trio program awaits the same functions from
``qlsched.admin`` instead.
"""

from __future__ import annotations

import os
import sys

from qlsched.admin import ProjectEntry, SpecError, TaskEntry, TriggerEntry, sync

PROJECT = "reports"

PROJECTS = [ProjectEntry(id=PROJECT)]
TASKS = [
    TaskEntry(project=PROJECT, id="daily-report", command="report --daily"),
    TaskEntry(project=PROJECT, id="cache-warm", command="warm-cache"),
]
TRIGGERS = [
    TriggerEntry(
        project=PROJECT,
        id="daily-report-berlin",
        task="daily-report",
        cron="30 6 * * 1-5",  # 06:30 on weekdays, Berlin time
        timezone="Europe/Berlin",
        misfire="fire_once",
    ),
    # One trigger per region, built in a loop: the point of defining schedules in code.
    *(
        # jitter_ms: each run starts up to 2 minutes after its time (a per-occurrence hash,
        # the same on every replica), so the regions' caches are not all warmed at once.
        TriggerEntry(
            project=PROJECT,
            id=f"cache-warm-{region}",
            task="cache-warm",
            cron=cron,
            jitter_ms=120_000,
        )
        for region, cron in (("eu", "*/15 * * * *"), ("us", "5-59/15 * * * *"))
    ),
]


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    dsn = args[0] if args else os.environ.get("QLSCHED_ADMIN_DSN")
    if not dsn:
        print("usage: schedule_in_code.py ADMIN_DSN [--pause]", file=sys.stderr)
        return 2
    try:
        result = sync.publish(dsn, projects=PROJECTS, tasks=TASKS, triggers=TRIGGERS)
    except SpecError as exc:
        print(f"not published: {exc}", file=sys.stderr)
        return 2
    for name, change in {**result.tasks, **result.triggers}.items():
        print(f"{name}: {change}")
    if "--pause" in argv:
        ref = f"{PROJECT}/daily-report-berlin"
        print(sync.pause(dsn, ref, note="holiday week", actor="example"))
        print(sync.resume(dsn, ref, actor="example"))
        for state in sync.list_schedules(dsn):
            kinds = [a.kind for a in state.actions]
            print(f"{state.project_id}/{state.trigger_id}: paused={state.paused} actions={kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
