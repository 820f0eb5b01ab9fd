"""A trigger the cluster cannot admit is impossible to miss (issue #14, hole 2): a refusal
that lasts until a re-publish is named by a diagnostic and a metric on the replica that met
it, and by a database-wide read that ``status`` and ``check`` show."""

from __future__ import annotations

import json

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from qlsched.cluster.coordinator import Coordinator
from qlsched.cluster.metrics import Metrics
from qlsched.core.config import Config
from qlsched.core.specs import ProjectEntry, PublishFile, TaskEntry
from qlsched.postgres.health import RefusedTrigger, refused_triggers
from qlsched.postgres.observe import refused_due_triggers
from tests.integration.adapter_support import Env, trigger
from tests.integration.schema_support import run_cli

# Each leaves the schedule row active and the trigger row as published, and makes every
# admit of p/y refuse for a reason no replica can heal.
STRANDINGS = {
    "revision_changed:task": "UPDATE qlsched.tasks SET revision = revision + 1"
    " WHERE task_id = 'ty'",
    "revision_changed:execution": "UPDATE qlsched.execution_revisions SET task_revision = 9"
    " WHERE task_id = 'ty'",
    "digest_invalid:task": "UPDATE qlsched.tasks SET content_digest = repeat('0', 64)"
    " WHERE task_id = 'ty'",
    "inactive:trigger_disabled": "UPDATE qlsched.triggers SET enabled = false"
    " WHERE trigger_id = 'y'",
}


def refused_sample(metrics: Metrics, outcome: str, part: str) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            if s.name == "qlsched_admits_refused_total" and s.labels == {
                "outcome": outcome,
                "part": part,
                "profile": "cluster",
            }:
                return s.value
    return 0.0


@pytest.mark.parametrize("reason", sorted(STRANDINGS))
async def test_a_lasting_refusal_is_named_everywhere(env: Env, reason: str) -> None:
    """Rule: when every admit of a trigger is refused for a lasting reason, the round that
    meets it emits a diagnostic naming the trigger and the reason, the replica's metric
    ``qlsched_admits_refused_total{outcome, part}`` counts it, and the database-wide read
    (what ``status`` and ``check`` show) lists exactly that trigger with that reason, while
    its healthy neighbour is admitted and not listed; ``status``'s bounded read (among the
    rows an admit meets) lists it as well, its claim left to expire."""
    await env.publish(
        PublishFile(
            projects=[ProjectEntry(id="p")],
            tasks=[
                TaskEntry(project="p", id="tx", command="true"),
                TaskEntry(project="p", id="ty", command="true"),
            ],
            triggers=[trigger("p", "x", task="tx"), trigger("p", "y", task="ty")],
        )
    )
    assert await env.runtime(refused_triggers) == []
    await env.su_exec(STRANDINGS[reason])
    await env.make_due()
    metrics = Metrics()
    coordinator = Coordinator(env.store, Config(owner="r1"), env.sink, metrics)

    stats = await coordinator.run_round()

    outcome, part = reason.split(":")
    assert stats.admitted == 1
    [d] = [d for d in env.sink.items if d.trigger_id == "y"]
    assert (d.code, d.part, d.project_id) == (outcome, part, "p")
    assert refused_sample(metrics, outcome, part) == 1
    assert await env.runtime(refused_triggers) == [RefusedTrigger("p", "y", reason)]
    # status's bounded read finds it too: the refused row keeps its claim until it expires.
    assert (await env.schedule("p", "y"))["claim_token"] is not None
    assert await env.runtime(refused_due_triggers) == [RefusedTrigger("p", "y", reason)]


async def test_status_and_check_name_a_refused_trigger(env: Env) -> None:
    """Rule: ``qlsched status`` (observer) lists a trigger every admit refuses, with the
    reason, in its text and its ``--json``; ``qlsched check`` stays ready (one stranded
    trigger must not stop the cluster) and prints an ``attention`` line naming it."""
    await env.publish(
        PublishFile(
            projects=[ProjectEntry(id="p")],
            tasks=[TaskEntry(project="p", id="ty", command="true")],
            triggers=[trigger("p", "y", task="ty")],
        )
    )
    await env.su_exec(STRANDINGS["revision_changed:task"])
    db = env.db

    status = await trio.to_thread.run_sync(run_cli, ["status", "--dsn", db.observer_dsn])
    assert status.returncode == 0, status.stderr
    assert "cannot admit p/y until it is re-published: revision_changed:task" in status.stdout
    as_json = await trio.to_thread.run_sync(run_cli, ["status", "--json", "--dsn", db.observer_dsn])
    assert json.loads(as_json.stdout)["refused"] == [
        {"project_id": "p", "trigger_id": "y", "reason": "revision_changed:task"}
    ]
    check = await trio.to_thread.run_sync(run_cli, ["check", "--dsn", db.runtime_dsn])
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.splitlines()[-1] == (
        "attention: cannot admit p/y until it is re-published: revision_changed:task"
    )
