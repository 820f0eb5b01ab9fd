"""The task's worker fields (docs/contract.md §13): in the payload only when not default (so
older digests stay), read back by the worker, checked at publish like every field."""

from __future__ import annotations

import pytest

from qlsched.core.specs import SpecError, TaskEntry, execution_payload, publish_file_from
from qlsched.core.work import decode_payload


def test_a_default_task_keeps_its_old_payload() -> None:
    """Rule: a task without worker fields has the payload (and so the digest) it had before
    migration 0010: upgrading re-revisions nothing."""
    task = TaskEntry(project="p", id="t", command="echo hi")
    assert execution_payload("p", task) == (
        '{"command":"echo hi","executor":"remote_worker","project":"p","task":"t"}'
    )


def test_worker_fields_reach_the_worker() -> None:
    """Rule: non-default fields join the payload and the worker reads them back; argv is
    split without a shell unless shell = true."""
    task = TaskEntry(
        project="p",
        id="t",
        command="echo 'a b' > out",
        shell=True,
        timeout_ms=5000,
        max_attempts=3,
        retry_backoff_ms=100,
    )
    payload = decode_payload(execution_payload("p", task))
    assert (payload.shell, payload.timeout_ms, payload.max_attempts) == (True, 5000, 3)
    assert payload.retry_backoff_ms == 100
    assert payload.argv() == ["/bin/sh", "-c", "echo 'a b' > out"]
    plain = decode_payload(
        execution_payload("p", TaskEntry(project="p", id="t", command="a 'b c'"))
    )
    assert plain.argv() == ["a", "b c"]


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("max_attempts", 0, 'tasks[0] (id "t"): max_attempts: Expected `int` >= 1'),
        ("max_attempts", 101, "max_attempts: Expected `int` <= 100"),
        ("timeout_ms", -1, "timeout_ms: Expected `int` >= 0"),
        ("retry_backoff_ms", 86_400_001, "retry_backoff_ms: Expected `int` <= 86400000"),
        ("shell", "yes", "shell: Expected `bool`"),
    ],
)
def test_bad_worker_fields_are_named(field: str, value: object, says: str) -> None:
    """Rule: a bad worker field is a SpecError naming the entry and the field."""
    data = {
        "projects": [{"id": "p"}],
        "tasks": [{"project": "p", "id": "t", "command": "true", field: value}],
    }
    with pytest.raises(SpecError) as caught:
        publish_file_from(data)
    assert says in str(caught.value)
