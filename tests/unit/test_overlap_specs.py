"""The overlap policy and start deadline in the publish file (docs/contract.md §13): each
non-default value is part of the trigger's digest (a new revision, older claims fenced
out); the defaults add nothing (``test_dst_policy_specs`` pins the digest from before any
optional field); bad values are one line naming the field."""

from __future__ import annotations

import msgspec
import pytest

from qlsched.core.specs import SpecError, TriggerEntry, decode_publish_file, trigger_digest

HEAD = (
    b'[[projects]]\nid = "p"\n\n[[tasks]]\nproject = "p"\nid = "t"\ncommand = "x"\n\n'
    b'[[triggers]]\nproject = "p"\nid = "tr"\ntask = "t"\ncron = "* * * * *"\n'
)
BASE = TriggerEntry(project="p", id="tr", task="t", cron="* * * * *")


@pytest.mark.parametrize(
    "change",
    [
        {"overlap": "skip"},
        {"overlap": "buffer_one"},
        {"overlap": "cancel_other"},
        {"start_deadline_ms": 60_000},
    ],
)
def test_a_non_default_value_changes_the_digest(change: dict[str, object]) -> None:
    """Rule: a changed policy or deadline is a new revision (publish clears the cursor)."""
    changed = msgspec.structs.replace(BASE, **change)
    assert trigger_digest(changed, "0" * 64) != trigger_digest(BASE, "0" * 64)


def test_the_explicit_defaults_keep_the_digest() -> None:
    """Rule: writing the defaults out changes nothing (no re-revision on upgrade)."""
    explicit = msgspec.structs.replace(BASE, overlap="allow", start_deadline_ms=None)
    assert trigger_digest(explicit, "0" * 64) == trigger_digest(BASE, "0" * 64)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            b'overlap = "never"\n',
            "overlap: 'never' is not one of allow, skip, buffer_one, cancel_other",
        ),
        (b"start_deadline_ms = 604800001\n", "start_deadline_ms: Expected `int` <= 604800000"),
        (b"start_deadline_ms = -1\n", "start_deadline_ms: Expected `int` >= 1"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_field(line: bytes, message: str) -> None:
    """Rule: a bad value rejects the file with one line naming the entry and the field."""
    with pytest.raises(SpecError) as caught:
        decode_publish_file(HEAD + line)
    assert str(caught.value) == f'triggers[0] (id "tr"): {message}'
