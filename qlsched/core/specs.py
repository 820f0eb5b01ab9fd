"""The publish file (TOML) as validated Structs, and the canonical digests of its content.

A file with any invalid entry is rejected whole: ``SpecError`` names the entry and the
field (``triggers[2] (id "nightly"): cron: hour: 25 is out of range 0-23``). Digests are
SHA-256 over canonical JSON (sorted keys, no whitespace), so the same content always has
the same digest and publishing the same file twice changes nothing.

Every limit the database enforces (the id pattern, the cron and timezone lengths, the grace
bounds, no NUL in text) is checked here, before any connection: a file that passes never
fails a CHECK constraint at publish. The file itself is bounded in size and nesting
(``tomlfile``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any, Literal

import msgspec

from qlsched.core.cron import (
    DST_FOLD_DEFAULT,
    DST_FOLDS,
    DST_GAP_DEFAULT,
    DST_GAPS,
    CronError,
    DstFold,
    DstGap,
    parse_cron,
)
from qlsched.core.jitter import JITTER_MS_MAX, jitter_problem
from qlsched.core.tomlfile import TomlFileError, decode_toml, printable
from qlsched.core.work import MAX_ATTEMPTS_MAX, RETRY_BACKOFF_MS_MAX, TIMEOUT_MS_MAX

# The database's CHECK is `~ '^...$'`, where `$` is the end of the text; Python's `$` also
# matches before a final newline, so `\Z` (or "abc\n" would pass here and fail there).
ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}\Z"
Id = Annotated[str, msgspec.Meta(pattern=ID_PATTERN)]
ID_RULE = "[a-z0-9][a-z0-9_.-]{0,62}"
COMMAND_MAX_BYTES = 1_000_000
CRON_MAX_CHARS = 200
"""``triggers_cron_check``: length(cron) BETWEEN 1 AND 200."""
TIMEZONE_MAX_CHARS = 64
"""``triggers_timezone_check``: length(timezone) BETWEEN 1 AND 64."""
GRACE_MAX_MS = 86_400_000
START_DEADLINE_MAX_MS = 604_800_000
"""``triggers_start_deadline_ms_check``: a week."""
Overlap = Literal["allow", "skip", "buffer_one", "cancel_other"]
OVERLAP_DEFAULT: Overlap = "allow"
OVERLAPS: tuple[Overlap, ...] = ("allow", "skip", "buffer_one", "cancel_other")
PUBLISH_FILE_MAX_BYTES = 64 * 1024 * 1024
"""Room for many tasks of up to ``COMMAND_MAX_BYTES`` each, far below memory trouble."""
EXECUTOR = "remote_worker"
TRIGGER_ID_SCOPE = (
    "already a trigger of project {project}; trigger ids are unique across projects, because"
    " the idempotency key (ql3:cron:v1:<triggerId>:...) names the trigger, not its project"
)


class SpecError(ValueError):
    """An invalid publish file: one line naming the entry and the field."""


class ProjectEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: Id
    archived: bool = False


class TaskEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    project: Id
    id: Id
    command: str
    shell: bool = False
    """Run ``command`` with ``/bin/sh -c`` (default: split into argv, no shell)."""
    timeout_ms: Annotated[int, msgspec.Meta(ge=0, le=TIMEOUT_MS_MAX)] = 0
    """The worker stops the job after this long (0: no limit)."""
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=MAX_ATTEMPTS_MAX)] = 1
    """Attempts a Run may have: a failed or lost one is retried while fewer were made."""
    retry_backoff_ms: Annotated[int, msgspec.Meta(ge=0, le=RETRY_BACKOFF_MS_MAX)] = 0
    """A retry's Attempt is not claimable before this long after the last one ended."""


class TriggerEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    project: Id
    id: Id
    task: Id
    cron: str
    timezone: str = "UTC"
    misfire: Literal["skip", "fire_once"] = "skip"
    misfire_grace_ms: Annotated[int, msgspec.Meta(ge=0, le=GRACE_MAX_MS)] = 60_000
    enabled: bool = True
    dst_gap: DstGap = DST_GAP_DEFAULT
    """A fixed-hour wall time in a spring-forward gap: ``shift`` (fire at the gap's end) or
    ``skip`` (not that day). Part of the revision's digest."""
    dst_fold: DstFold = DST_FOLD_DEFAULT
    """A fixed-hour wall time in a repeated hour: ``first``, ``last`` or ``both`` instants."""
    jitter_ms: Annotated[int, msgspec.Meta(ge=0, le=JITTER_MS_MAX)] = 0
    """Each occurrence becomes due up to this much after its scheduled time (a hash of the
    trigger, its revision and the occurrence; ``core.jitter``). Below the shortest period."""
    overlap: Overlap = OVERLAP_DEFAULT
    """What an occurrence does while a Run of the trigger is unfinished: ``allow`` (a Run
    anyway), ``skip`` (none, counted), ``buffer_one`` (one Run held until the other ends,
    more skipped), ``cancel_other`` (a Run, and the unfinished ones are cancelled)."""
    start_deadline_ms: Annotated[int, msgspec.Meta(ge=1, le=START_DEADLINE_MAX_MS)] | None = None
    """A queued Run no worker started within this long is cancelled (``start_deadline``)."""


class PublishFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    projects: list[ProjectEntry] = []
    tasks: list[TaskEntry] = []
    triggers: list[TriggerEntry] = []


_CHOICES = {
    "misfire": "skip, fire_once",
    "dst_gap": ", ".join(DST_GAPS),
    "dst_fold": ", ".join(DST_FOLDS),
    "overlap": ", ".join(OVERLAPS),
}
"""Fields with a closed set of values: a bad one is named with the values it may take."""
_PATH = re.compile(r"^\$\.(projects|tasks|triggers)\[(\d+)\](?:\.(\w+))?")


def quoted(text: str) -> str:
    """``text`` in double quotes with every unprintable character escaped, so an id from a
    hostile file cannot write control sequences or fake lines into a terminal or log."""
    return '"' + printable(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


def _entry_label(data: Any, section: str, index: int) -> str:
    try:
        entry_id = data[section][index]["id"]
    except (KeyError, IndexError, TypeError):
        return f"{section}[{index}]"
    if not isinstance(entry_id, str):
        return f"{section}[{index}]"
    return f"{section}[{index}] (id {quoted(entry_id)})"


def decode_publish_file(raw: bytes) -> PublishFile:
    """Decode and validate a publish file; raise SpecError naming entry and field."""
    try:
        data = decode_toml(raw, max_bytes=PUBLISH_FILE_MAX_BYTES)
    except TomlFileError as exc:
        raise SpecError(str(exc)) from None
    return publish_file_from(data)


def publish_file_from(data: Any) -> PublishFile:
    """Convert plain data (a decoded file, or Structs built in code as builtins) and validate
    it: the one path both the TOML file and ``qlsched.admin`` take, so their errors match."""
    try:
        spec = msgspec.convert(data, PublishFile)
    except msgspec.ValidationError as exc:
        # The message may quote a key the file chose (an unknown field): escape it.
        message = printable(str(exc)).replace(f"regex {ID_PATTERN!r}", ID_RULE)
        # msgspec says "... - at `$.triggers[0].cron`": rewrite the path as entry + field.
        head, _, path = message.rpartition(" - at `")
        m = _PATH.match(path.rstrip("`"))
        if m is None:
            raise SpecError(message) from None
        label = _entry_label(data, m.group(1), int(m.group(2)))
        field = f"{m.group(3)}: " if m.group(3) else ""
        choices = _CHOICES.get(m.group(3) or "")
        if choices is not None and head.startswith("Invalid enum value "):
            head = f"{head.removeprefix('Invalid enum value ')} is not one of {choices}"
        raise SpecError(f"{label}: {field}{head or message}") from None
    validate_publish_file(spec)
    return spec


def validate_publish_file(spec: PublishFile) -> None:
    """Cross-entry rules msgspec cannot express: references, duplicates, cron, size."""
    projects = {p.id for p in spec.projects}
    seen: set[tuple[str, ...]] = set()
    for i, p in enumerate(spec.projects):
        if ("p", p.id) in seen:
            raise SpecError(f'projects[{i}] (id "{p.id}"): id: duplicate project')
        seen.add(("p", p.id))
    tasks: set[tuple[str, str]] = set()
    for i, t in enumerate(spec.tasks):
        label = f'tasks[{i}] (id "{t.id}")'
        if t.project not in projects:
            raise SpecError(f'{label}: project: "{t.project}" is not in [[projects]]')
        if (t.project, t.id) in tasks:
            raise SpecError(f"{label}: id: duplicate task in project {t.project}")
        if not t.command.strip():
            raise SpecError(f"{label}: command: must not be empty")
        if "\x00" in t.command:
            raise SpecError(f"{label}: command: contains a NUL character")
        if len(t.command.encode("utf-8")) > COMMAND_MAX_BYTES:
            raise SpecError(f"{label}: command: longer than {COMMAND_MAX_BYTES} bytes")
        tasks.add((t.project, t.id))
    triggers: set[tuple[str, str]] = set()
    trigger_projects: dict[str, str] = {}
    for i, tr in enumerate(spec.triggers):
        label = f'triggers[{i}] (id "{tr.id}")'
        if tr.project not in projects:
            raise SpecError(f'{label}: project: "{tr.project}" is not in [[projects]]')
        if (tr.project, tr.task) not in tasks:
            raise SpecError(f'{label}: task: "{tr.task}" is not a task of {tr.project}')
        if (tr.project, tr.id) in triggers:
            raise SpecError(f"{label}: id: duplicate trigger in project {tr.project}")
        other = trigger_projects.setdefault(tr.id, tr.project)
        if other != tr.project:
            raise SpecError(f"{label}: id: {TRIGGER_ID_SCOPE.format(project=other)}")
        triggers.add((tr.project, tr.id))
        if len(tr.cron) > CRON_MAX_CHARS:
            raise SpecError(f"{label}: cron: longer than {CRON_MAX_CHARS} characters")
        if not 1 <= len(tr.timezone) <= TIMEZONE_MAX_CHARS:
            raise SpecError(f"{label}: timezone: expected 1..{TIMEZONE_MAX_CHARS} characters")
        try:
            schedule = parse_cron(tr.cron, tr.timezone, dst_gap=tr.dst_gap, dst_fold=tr.dst_fold)
        except CronError as exc:
            message = str(exc)
            if message.startswith("timezone: "):
                raise SpecError(f"{label}: {message}") from None
            raise SpecError(f"{label}: cron: {message}") from None
        if (problem := jitter_problem(tr.jitter_ms, schedule)) is not None:
            raise SpecError(f"{label}: jitter_ms: {problem}")


def _canonical(obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode(obj, order="sorted")


def task_execution(task: TaskEntry) -> tuple[str, str]:
    """The task's pinned execution payload and its digest, as both publishers store them
    (the digest is what a changed task is recognised by)."""
    payload = execution_payload(task.project, task)
    return payload, sha256_hex(payload)


def execution_payload(project_id: str, task: TaskEntry) -> str:
    """The pinned execution revision's payload: canonical JSON text (hashed at every admit).
    The worker's fields join it only when not their defaults, so the digests of tasks
    published before they existed stay the same (no re-revision on upgrade)."""
    fields: dict[str, object] = {
        "command": task.command,
        "executor": EXECUTOR,
        "project": project_id,
        "task": task.id,
    }
    if task.shell:
        fields["shell"] = True
    if task.timeout_ms:
        fields["timeout_ms"] = task.timeout_ms
    if task.max_attempts != 1:
        fields["max_attempts"] = task.max_attempts
    if task.retry_backoff_ms:
        fields["retry_backoff_ms"] = task.retry_backoff_ms
    return _canonical(fields).decode("utf-8")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def trigger_digest(trigger: TriggerEntry, task_digest: str) -> str:
    """Digest of everything that defines a trigger revision, the task's content included,
    so a changed task gives its triggers new revisions (and old claims fail their fence).
    A DST policy, a jitter, an overlap policy or a start deadline joins it only when it is
    not the default, so the digests of triggers published before they existed stay the same
    (no re-revision on upgrade)."""
    fields: dict[str, object] = {
        "cron": trigger.cron,
        "enabled": trigger.enabled,
        "kind": "cron",
        "misfire": trigger.misfire,
        "misfire_grace_ms": trigger.misfire_grace_ms,
        "task": trigger.task,
        "task_digest": task_digest,
        "timezone": trigger.timezone,
    }
    if trigger.dst_gap != DST_GAP_DEFAULT:
        fields["dst_gap"] = trigger.dst_gap
    if trigger.dst_fold != DST_FOLD_DEFAULT:
        fields["dst_fold"] = trigger.dst_fold
    if trigger.jitter_ms:
        fields["jitter_ms"] = trigger.jitter_ms
    if trigger.overlap != OVERLAP_DEFAULT:
        fields["overlap"] = trigger.overlap
    if trigger.start_deadline_ms is not None:
        fields["start_deadline_ms"] = trigger.start_deadline_ms
    return hashlib.sha256(_canonical(fields)).hexdigest()
