"""Jitter (docs/contract.md §10): the field in the publish file, its bounds, the digest rule,
the hash, the shortest period it must stay below, and the decision's due time."""

from __future__ import annotations

import hashlib
import json

import msgspec
import pytest

from qlsched.core.cron import next_after, parse_cron
from qlsched.core.decide import TriggerSpec, decide
from qlsched.core.jitter import Jitter, jitter_offset_ms, shortest_period_ms
from qlsched.core.outcomes import Fire, Initialize, NotDue, Skip
from qlsched.core.specs import SpecError, decode_publish_file, publish_file_from, trigger_digest

HEAD = (
    b'[[projects]]\nid = "p"\n\n[[tasks]]\nproject = "p"\nid = "t"\ncommand = "x"\n\n'
    b'[[triggers]]\nproject = "p"\nid = "tr"\ntask = "t"\n'
)
MINUTE = 60_000
HOUR = 3_600_000


def file(cron: str, extra: str = "") -> bytes:
    return HEAD + f'cron = "{cron}"\n{extra}'.encode()


def refusal(cron: str, extra: str) -> str:
    with pytest.raises(SpecError) as caught:
        decode_publish_file(file(cron, extra))
    return str(caught.value)


def test_jitter_defaults_to_zero_and_adds_nothing_to_the_digest() -> None:
    """Rule: a trigger without ``jitter_ms`` has 0, and its digest is the one it had before
    jitter existed (SHA-256 of the canonical JSON of the other fields), so upgrading does
    not give every trigger a new revision; a jitter other than 0 changes the digest."""
    trigger = decode_publish_file(file("*/5 * * * *")).triggers[0]
    assert trigger.jitter_ms == 0
    before = {
        "cron": trigger.cron,
        "enabled": True,
        "kind": "cron",
        "misfire": "skip",
        "misfire_grace_ms": 60_000,
        "task": "t",
        "task_digest": "0" * 64,
        "timezone": "UTC",
    }
    text = json.dumps(before, sort_keys=True, separators=(",", ":"))
    assert trigger_digest(trigger, "0" * 64) == hashlib.sha256(text.encode()).hexdigest()
    jittered = decode_publish_file(file("*/5 * * * *", "jitter_ms = 1000\n")).triggers[0]
    assert trigger_digest(jittered, "0" * 64) != trigger_digest(trigger, "0" * 64)


@pytest.mark.parametrize(
    ("cron", "extra", "message"),
    [
        ("0 * * * *", "jitter_ms = -1\n", "jitter_ms: Expected `int` >= 0"),
        ("0 0 * * *", "jitter_ms = 3600001\n", "jitter_ms: Expected `int` <= 3600000"),
        ("0 0 * * *", "jitter_ms = 1.5\n", "jitter_ms: Expected `int`, got `float`"),
        ("0 0 * * *", 'jitter_ms = "5"\n', "jitter_ms: Expected `int`, got `str`"),
        (
            "* * * * *",
            "jitter_ms = 60000\n",
            "jitter_ms: 60000 is not below the trigger's shortest period between occurrences,"
            " 60000 ms (1 min)",
        ),
        (
            "0 * * * *",
            "jitter_ms = 3600000\n",
            "jitter_ms: 3600000 is not below the trigger's shortest period between"
            " occurrences, 3600000 ms (1 h)",
        ),
        (
            # Fires at 1:30 twice on New York's fall-back day: an hour apart.
            "30 1 * * *",
            'timezone = "America/New_York"\ndst_fold = "both"\njitter_ms = 3600000\n',
            "jitter_ms: 3600000 is not below the trigger's shortest period between"
            " occurrences, 3600000 ms (1 h)",
        ),
        (
            # 1:45 EST, then 2:15 and 2:45 fall in the gap and fire at 3:00 EDT: 15 min.
            "15,45 1,2 * * *",
            'timezone = "America/New_York"\njitter_ms = 900000\n',
            "jitter_ms: 900000 is not below the trigger's shortest period between"
            " occurrences, 900000 ms (15 min)",
        ),
    ],
)
def test_a_bad_jitter_is_one_line_naming_the_trigger(cron: str, extra: str, message: str) -> None:
    """Rule: ``jitter_ms`` is an integer, 0 <= jitter_ms <= 3,600,000, and strictly below the
    trigger's shortest period between consecutive occurrences under its cron, zone and DST
    policy; anything else rejects the file with one line naming the entry and the field."""
    assert refusal(cron, extra) == f'triggers[0] (id "tr"): {message}'


@pytest.mark.parametrize(
    ("cron", "extra"),
    [
        ("* * * * *", "jitter_ms = 59999\n"),
        ("0 0 * * *", "jitter_ms = 3600000\n"),
        ("15,45 1,2 * * *", "jitter_ms = 899999\n"),
        ("15,45 1,2 * * *", 'timezone = "America/New_York"\njitter_ms = 899999\n'),
        ("*/5 * * * * *", "jitter_ms = 4999\n"),
    ],
)
def test_a_jitter_below_the_period_is_accepted(cron: str, extra: str) -> None:
    """Rule: a jitter just below the shortest period is accepted, on both paths (the TOML
    file and the Structs ``qlsched.admin`` takes, which convert through the same code)."""
    spec = decode_publish_file(file(cron, extra))
    assert spec.triggers[0].jitter_ms > 0
    assert publish_file_from(msgspec.to_builtins(spec)) == spec


@pytest.mark.parametrize(
    ("cron", "zone", "policy", "period_ms"),
    [
        ("* * * * *", "UTC", {}, MINUTE),
        ("*/5 * * * * *", "Europe/Berlin", {}, 5_000),
        ("0,30 0,23 * * *", "UTC", {}, 30 * MINUTE),
        ("0 1,3 * * *", "UTC", {}, HOUR + 1),  # two hours: beyond what a jitter may reach
        ("0 1,3 * * *", "America/New_York", {}, HOUR),  # 1:00 EST to 3:00 EDT
        ("30 1 * * *", "Australia/Lord_Howe", {"dst_fold": "both"}, 30 * MINUTE),
        ("30 1 * * *", "Australia/Lord_Howe", {}, HOUR + 1),
        ("59 1,2 * * *", "America/New_York", {}, MINUTE),  # 2:59 shifts to 3:00 EDT
        ("59 1,2 * * *", "America/New_York", {"dst_gap": "skip"}, HOUR),
        ("0 0 * * *", "Europe/London", {}, HOUR + 1),
        ("0,30 0,23 * * 1", "UTC", {}, 30 * MINUTE),
        ("30 23 * * 1,2", "UTC", {}, HOUR + 1),
        ("0,59 0,23 * * 1,2", "UTC", {}, MINUTE),  # Monday 23:59 to Tuesday 0:00
    ],
)
def test_shortest_period_is_exact_below_an_hour(
    cron: str, zone: str, policy: dict[str, str], period_ms: int
) -> None:
    """Rule: the shortest time between consecutive occurrences, under the zone's offset
    changes and the DST policy, is exact up to an hour (beyond it, one hour and 1 ms)."""
    assert shortest_period_ms(parse_cron(cron, zone, **policy)) == period_ms


@pytest.mark.parametrize(
    ("cron", "zone", "policy"),
    [
        ("15,45 1,2 * * *", "America/New_York", {}),
        ("*/20 1,2 * * *", "Australia/Lord_Howe", {"dst_fold": "both"}),
        ("0,50 1 * * *", "America/New_York", {"dst_fold": "both"}),
        ("0 * * * *", "Europe/London", {}),
    ],
)
def test_shortest_period_matches_walking_the_occurrences(
    cron: str, zone: str, policy: dict[str, str]
) -> None:
    """Rule: the computed period is the smallest step a walk of the scheduler's own
    ``next_after`` finds over two years of real occurrences (DST days included)."""
    schedule = parse_cron(cron, zone, **policy)
    t, smallest = 1_767_225_600_000, None  # 2026-01-01
    while t < 1_830_297_600_000:  # 2028-01-01
        later = next_after(schedule, t)
        step = later - t
        smallest = step if smallest is None else min(smallest, step)
        t = later
    assert smallest is not None
    assert shortest_period_ms(schedule) == min(smallest, HOUR + 1)


def test_the_hash_is_pinned() -> None:
    """Rule: h is the first 56 bits of SHA-256 over
    ``ql3:jitter:v1:<project>:<trigger>:<revision>:<scheduledForMs>`` modulo jitter_ms (0
    without jitter). Pinned: every replica, version and profile must compute this value."""
    text = b"ql3:jitter:v1:p:t:1:1700000000000"
    expected = int.from_bytes(hashlib.sha256(text).digest()[:7], "big") % 1000
    assert jitter_offset_ms("p", "t", 1, 1_700_000_000_000, 1000) == expected == 106
    assert jitter_offset_ms("p", "t", 1, 1_700_000_000_000, 0) == 0
    offsets = {jitter_offset_ms("p", "t", 1, s * MINUTE, 50_000) for s in range(2000)}
    assert all(0 <= h < 50_000 for h in offsets)
    assert len(offsets) > 1900  # spread, not one value


SPEC = TriggerSpec(cron=parse_cron("* * * * *"), misfire_policy="skip", misfire_grace_ms=10_000)
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, an occurrence
J = Jitter("p", "tr", 1, 50_000)


def test_an_occurrence_is_not_due_before_its_jittered_time() -> None:
    """Rule: with jitter, the occurrence S is due at S + h, not before: NotDue at S + h - 1,
    Fire at S + h with ``scheduled_for`` S (the key's time) and its offset h."""
    h = J.offset_ms(T0)
    assert h > 0
    assert decide(SPEC, T0, T0 + h - 1, J) == NotDue()
    assert decide(SPEC, T0, T0 + h, J) == Fire(
        scheduled_for_ms=T0, next_ms=T0 + MINUTE, jitter_offset_ms=h
    )
    assert decide(SPEC, T0, T0, None) == Fire(scheduled_for_ms=T0, next_ms=T0 + MINUTE)


def test_the_misfire_grace_is_measured_from_the_due_time() -> None:
    """Rule: an occurrence is late by ``now - (S + h)``: it fires up to the grace after its
    due time, and policy ``skip`` skips it only past that."""
    h = J.offset_ms(T0)
    at_grace = decide(SPEC, T0, T0 + h + 10_000, J)
    assert isinstance(at_grace, Fire)
    assert isinstance(decide(SPEC, T0, T0 + h + 10_001, J), Skip)


def test_a_past_occurrence_not_yet_due_stays_the_cursor() -> None:
    """Rule: a late decision passes over only occurrences already due: the latest occurrence
    at or before now whose due time is after now becomes the next cursor (not counted), and
    one already due is counted as passed over."""
    late = Jitter("p", "tr", 1, 59_000)
    spec = msgspec.structs.replace(SPEC, misfire_policy="fire_once")
    # Find an occurrence L = T0 + k minutes with h(L) > 1 s, and decide just after L.
    k = next(k for k in range(1, 100) if late.offset_ms(T0 + k * MINUTE) > 1_000)
    last = T0 + k * MINUTE
    decision = decide(spec, T0, last + 500, late)
    assert decision == Fire(
        scheduled_for_ms=T0,
        next_ms=last,
        coalesced=k - 1,
        jitter_offset_ms=late.offset_ms(T0),
    )
    # Once L is due it is passed over too, and the cursor moves past now.
    due_last = last + late.offset_ms(last)
    decision = decide(spec, T0, due_last, late)
    assert decision == Fire(
        scheduled_for_ms=T0,
        next_ms=last + MINUTE,
        coalesced=k,
        jitter_offset_ms=late.offset_ms(T0),
    )


def test_initialize_ignores_jitter() -> None:
    """Rule: an uninitialised row's cursor is the first occurrence after now, as without
    jitter; its due time follows from it."""
    assert decide(SPEC, None, T0 + 1, J) == Initialize(next_ms=T0 + MINUTE)
