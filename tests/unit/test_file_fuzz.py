"""The publish and config decoders against hostile input (hypothesis): arbitrary bytes,
arbitrary TOML, hostile strings in every field, deep nesting, mutations of a valid file.

What holds for every input: decoding a publish file raises nothing but ``SpecError`` and
decoding a config file nothing but ``ConfigError`` (so the CLI prints one line, never a
traceback); a publish file that is accepted fits every limit the database enforces (the
id pattern as PostgreSQL reads it, cron 1..200 and timezone 1..64 characters, grace
0..86 400 000, no NUL) and round-trips (written back as TOML, it decodes to the same
entries and digests); an accepted config file round-trips too.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlsched.core.config import Config, ConfigError, decode_config_file
from qlsched.core.specs import (
    PublishFile,
    SpecError,
    decode_publish_file,
    execution_payload,
    sha256_hex,
    trigger_digest,
)
from qlsched.core.tomlfile import MAX_DEPTH, bracket_depth

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VALID_FILE = (Path(__file__).resolve().parents[2] / "examples" / "triggers.toml").read_bytes()
# The database's CHECK, as PostgreSQL reads it: `$` is the end of the text (no newline).
PG_ID = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


# ---------------------------------------------------------------------------------------------
# A TOML writer for the values tomllib returns (enough for these tests: no dates)


def toml_str(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but DEL must be escaped too."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    assert isinstance(value, dict), value
    return "{" + ", ".join(f"{toml_str(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(doc: dict[str, Any]) -> bytes:
    """Scalars and inline values first, then arrays of tables as ``[[name]]`` blocks."""
    lines = []
    tables = {}
    for key, value in doc.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            tables[key] = value
        else:
            lines.append(f"{toml_str(key)} = {toml_value(value)}")
    for key, entries in tables.items():
        for entry in entries:
            lines.append(f"[[{toml_str(key)}]]")
            lines += [f"{toml_str(k)} = {toml_value(v)}" for k, v in entry.items()]
    return ("\n".join(lines) + "\n").encode()


def publish_document(spec: PublishFile) -> bytes:
    """``spec`` written back as a publish file, every field it holds (None ones left out)."""

    def entries(items: list[Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in msgspec.to_builtins(x).items() if v is not None} for x in items]

    return toml_document(
        {
            "projects": entries(spec.projects),
            "tasks": entries(spec.tasks),
            "triggers": entries(spec.triggers),
        }
    )


# ---------------------------------------------------------------------------------------------
# What an accepted publish file must satisfy


def digests(spec: PublishFile) -> list[str]:
    tasks = {(t.project, t.id): t for t in spec.tasks}
    return [
        trigger_digest(tr, sha256_hex(execution_payload(tr.project, tasks[(tr.project, tr.task)])))
        for tr in spec.triggers
    ]


def check_publish(raw: bytes) -> None:
    """Decode ``raw``: SpecError, or a file within the database's limits that round-trips."""
    try:
        spec = decode_publish_file(raw)
    except SpecError as exc:
        problem = str(exc)
        assert "\n" not in problem
        return
    for entry in (*spec.projects, *spec.tasks, *spec.triggers):
        assert PG_ID.fullmatch(entry.id), entry
    for task in spec.tasks:
        assert PG_ID.fullmatch(task.project)
        assert "\x00" not in task.command
    for tr in spec.triggers:
        assert all(PG_ID.fullmatch(x) for x in (tr.project, tr.task))
        assert 1 <= len(tr.cron) <= 200
        assert 1 <= len(tr.timezone) <= 64
        assert 0 <= tr.misfire_grace_ms <= 86_400_000
        assert "\x00" not in tr.cron + tr.timezone
    again = decode_publish_file(publish_document(spec))
    assert again == spec
    assert digests(again) == digests(spec)


def check_config(raw: bytes) -> None:
    """Decode ``raw`` as a config file: ConfigError, or options that round-trip."""
    try:
        values = decode_config_file(raw, "config file f.toml")
        Config(**values)
    except ConfigError as exc:
        problem = str(exc)
        assert "\n" not in problem
        return
    written = toml_document({k: v for k, v in values.items() if v is not None})
    assert decode_config_file(written, "config file again.toml") == {
        k: v for k, v in values.items() if v is not None
    }


# ---------------------------------------------------------------------------------------------
# Strategies

HOSTILE = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=80),
    st.sampled_from(
        [
            "",
            "p",
            "p\n",
            "\np",
            "P",
            "p\x00",
            "p\u202eq",
            "x" * 63,
            "x" * 64,
            "p;--",
            "p\x1b[31m",
            "UTC",
            "Asia/Shanghai",
            "America/New_York",
            "../etc/passwd",
            "* * * * *",
            "*/5 * * * * *",
            "@daily",
            " ".join(["0"] * 5) + " " * 300,
            ",".join(str(i) for i in range(60)) + " * * * *",
            "0 0 30 2 *",
            "0 0 L * *",
        ]
    ),
)
SCALAR = st.one_of(
    HOSTILE,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
)
TOML_VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(HOSTILE, inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def publish_like(draw: st.DrawFn) -> dict[str, Any]:
    """A document shaped like a publish file, each field hostile or plausible, sometimes
    with an extra field or a wrong type."""
    field = st.one_of(HOSTILE, st.just("p"), st.just("t"), SCALAR)
    project = draw(st.one_of(st.just("p"), HOSTILE))
    tasks = [
        {
            "project": draw(st.one_of(st.just(project), field)),
            "id": draw(field),
            "command": draw(field),
        }
        for _ in range(draw(st.integers(0, 2)))
    ]
    triggers = []
    for _ in range(draw(st.integers(0, 2))):
        trig: dict[str, Any] = {
            "project": draw(st.one_of(st.just(project), field)),
            "id": draw(field),
            "task": draw(st.one_of(st.sampled_from([t["id"] for t in tasks] or ["t"]), field)),
            "cron": draw(st.one_of(st.just("* * * * *"), HOSTILE)),
        }
        optional = {
            "timezone": HOSTILE,
            "misfire": st.one_of(st.sampled_from(["skip", "fire_once"]), HOSTILE),
            "misfire_grace_ms": st.one_of(st.integers(-1, 86_400_001), SCALAR),
            "enabled": st.one_of(st.booleans(), SCALAR),
            "extra": SCALAR,
        }
        for key, strategy in optional.items():
            if draw(st.booleans()):
                trig[key] = draw(strategy)
        triggers.append(trig)
    return {"projects": [{"id": project}], "tasks": tasks, "triggers": triggers}


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` with a few bytes replaced, inserted or deleted, or cut short."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["replace", "insert", "delete", "cut"]))
        byte = draw(st.sampled_from(b"[]{}\"'#=\n\\.,\x00\xff"))
        if kind == "replace" and at < len(data):
            data[at] = byte
        elif kind == "insert":
            data[at:at] = bytes([byte])
        elif kind == "delete":
            del data[at : at + 1]
        else:
            del data[at:]
    return bytes(data)


# ---------------------------------------------------------------------------------------------
# Properties


@FUZZ
@given(st.binary(max_size=600))
def test_arbitrary_bytes(raw: bytes) -> None:
    """Rule: any bytes give the decoders' own error or an accepted, round-tripping file."""
    check_publish(raw)
    check_config(raw)


@FUZZ
@given(st.dictionaries(HOSTILE, TOML_VALUE, max_size=5))
def test_arbitrary_toml(doc: dict[str, Any]) -> None:
    """Rule: any TOML document (hostile keys and strings, big integers, nan, nested
    arrays and tables) gives the decoders' own error or an accepted file."""
    raw = toml_document(doc)
    check_publish(raw)
    check_config(raw)
    check_config(b"[qlsched]\n" + raw)


@FUZZ
@given(publish_like())
def test_hostile_fields_in_a_publish_file(doc: dict[str, Any]) -> None:
    """Rule: a publish-shaped file with hostile values in any field is rejected with a
    SpecError, or accepted only within every limit of the database (and round-trips)."""
    check_publish(toml_document(doc))


@FUZZ
@given(mutated(VALID_FILE))
def test_mutations_of_a_valid_file(raw: bytes) -> None:
    """Rule: a valid file with a few bytes damaged is rejected with a SpecError or still
    accepted within the database's limits."""
    check_publish(raw)


@FUZZ
@given(
    st.sampled_from(["array", "inline", "dotted", "header", "mixed"]),
    st.integers(min_value=1, max_value=3000),
)
def test_deep_nesting(shape: str, depth: int) -> None:
    """Rule: nesting of any depth, in any TOML form, is accepted up to the bound or
    rejected with one line ("nested deeper than ..."), never a RecursionError."""
    raw = {
        "array": b"x = " + b"[" * depth + b"]" * depth,
        "inline": b"x = " + b"{a = " * depth + b"1" + b"}" * depth,
        "dotted": b"x" + b".a" * depth + b" = 1",
        "header": b"[x" + b".a" * depth + b"]\n",
        "mixed": b"x = " + b"[{a = " * depth + b"1" + b"}]" * depth,
    }[shape]
    for decode, error in (
        (decode_publish_file, SpecError),
        (lambda r: decode_config_file(r, "config file f.toml"), ConfigError),
    ):
        if depth > MAX_DEPTH:
            with pytest.raises(error, match="nested deeper than 32 levels"):
                decode(raw)
        else:
            with contextlib.suppress(error):
                decode(raw)


def test_the_bracket_scan_skips_strings_and_comments() -> None:
    """Rule: brackets inside strings (all four kinds, with escaped quotes) and comments do
    not count as nesting; table headers do."""
    deep = "[" * 40
    raw = (
        f'a = "{deep}\\" {deep}"\nb = \'{deep}\'\nc = """\n{deep}"""""\n'
        f"d = '''{deep}'''\n# {deep}\n[[t]]\ne = [[1], {{x = [2]}}]\n"
    ).encode()
    assert bracket_depth(raw) == 3


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"x = " + b"1" * 5000, "not valid TOML: a number has too many digits"),
        (b"x = " + b"[" * 900 + b"]" * 900, "nested deeper than 32 levels"),
        (b"x" + b".a" * 900 + b" = 1", "nested deeper than 32 levels"),
        (b"\xff", "not UTF-8 (byte 0)"),
    ],
    ids=["long-integer", "deep-arrays", "deep-dotted-keys", "not-utf8"],
)
def test_known_bad_files_give_one_line(raw: bytes, message: str) -> None:
    """Rule: the inputs that once ended in a traceback (RecursionError, a bare ValueError
    from int()) are one-line errors naming the problem, for both decoders."""
    with pytest.raises(SpecError, match=re.escape(message)):
        decode_publish_file(raw)
    with pytest.raises(ConfigError, match=re.escape(f"config file f.toml: {message}")):
        decode_config_file(raw, "config file f.toml")


def test_the_database_limits_are_checked_before_any_connection() -> None:
    """Rule: a cron longer than 200 characters (valid to the parser), a timezone longer
    than 64, and an id with a trailing newline (which Python's `$` would let through and
    PostgreSQL's refuses) are SpecErrors naming the entry and the field."""
    minutes = ",".join(str(i) for i in range(60))
    long_cron = f"{minutes} {','.join(str(i) for i in range(24))} * * *"
    assert len(long_cron) > 200
    base = {"projects": [{"id": "p"}], "tasks": [{"project": "p", "id": "t", "command": "x"}]}
    trig = {"project": "p", "id": "tr", "task": "t", "cron": "* * * * *"}
    cases = [
        ({"triggers": [trig | {"cron": long_cron}]}, 'triggers[0] (id "tr"): cron: longer than'),
        ({"triggers": [trig | {"timezone": "A" * 65}]}, 'triggers[0] (id "tr"): timezone:'),
        ({"triggers": [trig | {"id": "tr\n"}]}, 'triggers[0] (id "tr\\x0a"): id:'),
    ]
    for extra, start in cases:
        with pytest.raises(SpecError) as caught:
            decode_publish_file(toml_document(base | extra))
        assert str(caught.value).startswith(start), str(caught.value)
