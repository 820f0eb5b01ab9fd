"""The admit's refusal codes: every ``(kind, part)`` admit.sql returns decodes through the
one table to the outcome it names, and any other pair is a typed error."""

from __future__ import annotations

import re

import pytest

from qlsched.core.outcomes import DigestInvalid, Inactive, RevisionChanged, outcome_code
from qlsched.postgres.admit_rows import REFUSALS, UnknownRefusal, decode_refusal
from qlsched.postgres.queries import query

_CODE = re.compile(r"ARRAY\['([a-z_]+)', '([a-z_]+)'\]")


def sql_codes() -> set[tuple[str, str]]:
    """The ``(kind, part)`` pairs admit.sql's spec checks can return."""
    return {(m[1], m[2]) for m in _CODE.finditer(query("admit"))}


def test_the_table_holds_exactly_the_codes_the_sql_returns() -> None:
    """A code added to admit.sql without its table entry (or left in the table after the
    SQL dropped it) fails here, not in a round."""
    assert len(sql_codes()) == 9
    assert set(REFUSALS) == sql_codes()


@pytest.mark.parametrize(("kind", "part"), sorted(sql_codes()))
def test_every_sql_code_decodes_to_the_outcome_it_names(kind: str, part: str) -> None:
    """The kind is the outcome's tag, the part its ``part`` (``reason`` for inactive), and
    the outcome is for the row's own trigger."""
    outcome = decode_refusal(kind, part, "p", "t")
    assert outcome_code(outcome) == kind
    assert (outcome.project_id, outcome.trigger_id) == ("p", "t")
    match outcome:
        case Inactive(reason=reason):
            assert reason == part
        case RevisionChanged(part=named) | DigestInvalid(part=named):
            assert named == part


@pytest.mark.parametrize(
    ("kind", "part"),
    [
        ("inactive", "project_gone"),
        ("revision_changed", "cursor"),  # an outcome part, but no spec check returns it
        ("fence_lost", "owner"),
        ("", ""),
    ],
)
def test_an_unknown_code_is_a_typed_error(kind: str, part: str) -> None:
    """A pair the table does not hold raises ``UnknownRefusal`` carrying the pair."""
    with pytest.raises(UnknownRefusal) as caught:
        decode_refusal(kind, part, "p", "t")
    assert (caught.value.kind, caught.value.part) == (kind, part)
