"""What a publish reports, shared by the cluster's (``qlsched.postgres.publish``) and the Edge
file's (``qlsched.sqlite.publish``), so both commands print the same lines, and the one file
error only the database can find: a new trigger id another project already has."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import msgspec

from qlsched.core.specs import TRIGGER_ID_SCOPE, SpecError, TriggerEntry

Change = Literal["added", "changed", "unchanged", "disabled", "repinned"]


class PublishResult(msgspec.Struct, frozen=True):
    projects: dict[str, Change]
    tasks: dict[str, Change]
    triggers: dict[str, Change]
    """Keyed ``project/trigger``."""

    def lines(self) -> Iterator[str]:
        """``project p: added``, then the tasks, then the triggers: what ``publish`` prints."""
        for kind, items in (
            ("project", self.projects),
            ("task", self.tasks),
            ("trigger", self.triggers),
        ):
            for name, change in items.items():
                yield f"{kind} {name}: {change}"


def id_taken(trigger: TriggerEntry, project: str) -> SpecError:
    """The error for a new trigger whose id ``project`` already has (ids are unique across
    projects); raising it rolls the whole publish back."""
    return SpecError(
        f"trigger {trigger.project}/{trigger.id}: id: "
        + TRIGGER_ID_SCOPE.format(project=project)
        + " (published before); nothing was published"
    )
