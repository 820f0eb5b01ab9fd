"""Secrets in the configuration: the HTTP token flows from ``QLSCHED_HTTP_TOKEN`` and the
config file (never a flag, so never in ``ps``), and no message ever echoes a secret
option's value (the DSN, the token)."""

from __future__ import annotations

import pytest

from qlsched.core.config import ConfigError, decode_config_file
from qlsched.settings import load_config

MARK = "QLMARK7z"


def test_the_http_token_comes_from_the_environment_or_the_file() -> None:
    """Rule: QLSCHED_HTTP_TOKEN sets http_token; `http_token` in a config file too; no
    token leaves it None (the endpoints open)."""
    assert load_config(env={"QLSCHED_HTTP_TOKEN": "t0k"}).http_token == "t0k"
    assert decode_config_file(b'http_token = "t0k"\n', "config file f") == {"http_token": "t0k"}
    assert load_config(env={}).http_token is None


@pytest.mark.parametrize("token", ["", " ", f" {MARK}", f"{MARK}\n", f"{MARK}\x1b", f"{MARK}é"])
def test_a_bad_token_is_refused_without_echoing_it(token: str) -> None:
    """Rule: an empty token, one with surrounding spaces or unprintable or non-ASCII
    characters is a ConfigError naming the option and the source, not the value."""
    with pytest.raises(ConfigError) as caught:
        load_config(env={"QLSCHED_HTTP_TOKEN": token})
    message = str(caught.value)
    assert message.startswith("http_token: ")
    assert "environment QLSCHED_HTTP_TOKEN" in message
    assert MARK not in message


@pytest.mark.parametrize("option", ["dsn", "http_token"])
def test_a_secret_of_the_wrong_type_is_not_echoed(option: str) -> None:
    """Rule: a DSN or token given as a non-string in a config file is refused without
    its value in the message."""
    raw = f'{option} = ["{MARK}"]\n'.encode()
    with pytest.raises(ConfigError) as caught:
        decode_config_file(raw, "config file f")
    assert str(caught.value) == f"{option}: expected a string (from config file f)"
