"""The DST policy in the publish file (docs/contract.md §3): two trigger fields, validated
before any connection, and part of the trigger's digest, so a changed policy is a new
revision and an unchanged file stays a no-op."""

from __future__ import annotations

import hashlib
import json

import pytest

from qlsched.core.specs import SpecError, TriggerEntry, decode_publish_file, trigger_digest

HEAD = (
    b'[[projects]]\nid = "p"\n\n[[tasks]]\nproject = "p"\nid = "t"\ncommand = "x"\n\n'
    b'[[triggers]]\nproject = "p"\nid = "tr"\ntask = "t"\ncron = "30 2 * * *"\n'
    b'timezone = "America/New_York"\n'
)


def entry(**policy: str) -> TriggerEntry:
    lines = "".join(f'{k} = "{v}"\n' for k, v in policy.items())
    return decode_publish_file(HEAD + lines.encode()).triggers[0]


def test_policy_defaults_to_shift_and_first() -> None:
    """A trigger without the fields has ``dst_gap = "shift"`` and ``dst_fold = "first"``,
    and the same digest as one spelling the defaults out (publishing either is the same)."""
    omitted, spelled = entry(), entry(dst_gap="shift", dst_fold="first")
    assert (omitted.dst_gap, omitted.dst_fold) == ("shift", "first")
    assert trigger_digest(omitted, "0" * 64) == trigger_digest(spelled, "0" * 64)


@pytest.mark.parametrize(
    "policy",
    [
        {"dst_gap": "skip"},
        {"dst_fold": "last"},
        {"dst_fold": "both"},
        {"dst_gap": "skip", "dst_fold": "both"},
    ],
)
def test_a_changed_policy_changes_the_digest(policy: dict[str, str]) -> None:
    """Each non-default policy gives another digest than the defaults: publish sees a new
    revision (cursor cleared, every older claim fenced out)."""
    assert trigger_digest(entry(**policy), "0" * 64) != trigger_digest(entry(), "0" * 64)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'dst_gap = "later"\n', "dst_gap: 'later' is not one of shift, skip"),
        (b'dst_fold = "twice"\n', "dst_fold: 'twice' is not one of first, last, both"),
        (b'dst_fold = "FIRST"\n', "dst_fold: 'FIRST' is not one of first, last, both"),
        (b"dst_gap = 1\n", "dst_gap: Expected `str`, got `int`"),
    ],
)
def test_a_bad_policy_is_one_line_naming_the_field(line: bytes, message: str) -> None:
    """A bad policy value rejects the file with one line naming the entry, the field and
    the values it may take."""
    with pytest.raises(SpecError) as caught:
        decode_publish_file(HEAD + line)
    assert str(caught.value) == f'triggers[0] (id "tr"): {message}'


def test_a_default_policy_keeps_the_digest_triggers_had_before_it_existed() -> None:
    """Rule: a default policy adds nothing to the digest, so a trigger published before
    migration 0005 keeps its digest (and revision) when the same file is published again
    after the upgrade. The digest before the policy: SHA-256 of the canonical JSON (sorted
    keys, no spaces) of the trigger's other fields."""
    trigger = entry()
    before = {
        "cron": trigger.cron,
        "enabled": trigger.enabled,
        "kind": "cron",
        "misfire": trigger.misfire,
        "misfire_grace_ms": trigger.misfire_grace_ms,
        "task": trigger.task,
        "task_digest": "0" * 64,
        "timezone": trigger.timezone,
    }
    text = json.dumps(before, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert trigger_digest(trigger, "0" * 64) == hashlib.sha256(text.encode()).hexdigest()
