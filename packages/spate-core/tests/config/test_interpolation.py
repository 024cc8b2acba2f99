"""B18: ``${V}``, ``${V:-d}``, ``${V:?msg}`` and ``$$`` inside string values, after parsing."""

from __future__ import annotations

import pytest
from spate.config import interpolate, interpolate_string, parse_config
from spate.errors import ConfigError

MINIMAL = """
pipeline:
  name: {name}
source:
  memory: {{}}
sink:
  capture: {{}}
"""


def _name(yaml_value: str, env: dict[str, str]) -> str:
    cfg = parse_config(MINIMAL.format(name=yaml_value), env=env, check_connectors=False)
    return cfg.pipeline.name


def test_b18_plain_variable_is_substituted() -> None:
    assert interpolate_string("a-${X}-b", {"X": "mid"}, "k") == "a-mid-b"


def test_b18_unset_variable_is_an_error_naming_variable_and_key() -> None:
    with pytest.raises(ConfigError) as info:
        interpolate_string("${MISSING_VAR}", {}, "sinks.a.clickhouse.user")
    assert info.value.path == "sinks.a.clickhouse.user"
    assert "MISSING_VAR" in str(info.value)
    assert "not set" in str(info.value)


def test_b18_set_but_empty_variable_stays_empty() -> None:
    assert interpolate_string("${EMPTY}", {"EMPTY": ""}, "k") == ""


def test_b18_default_applies_when_unset_or_empty() -> None:
    assert interpolate_string("${V:-fallback}", {}, "k") == "fallback"
    assert interpolate_string("${V:-fallback}", {"V": ""}, "k") == "fallback"
    assert interpolate_string("${V:-fallback}", {"V": "set"}, "k") == "set"
    assert interpolate_string("${V:-}", {}, "k") == ""


def test_b18_dash_without_colon_applies_only_when_unset() -> None:
    assert interpolate_string("${V-fallback}", {}, "k") == "fallback"
    assert interpolate_string("${V-fallback}", {"V": ""}, "k") == ""


def test_b18_question_mark_raises_the_given_message() -> None:
    with pytest.raises(ConfigError) as info:
        interpolate_string("${TOKEN:?set TOKEN to the API token}", {}, "source.s3.token")
    assert str(info.value) == "source.s3.token: TOKEN: set TOKEN to the API token"
    with pytest.raises(ConfigError, match="TOKEN: needed"):
        interpolate_string("${TOKEN:?needed}", {"TOKEN": ""}, "k")
    assert interpolate_string("${TOKEN?needed}", {"TOKEN": ""}, "k") == ""
    assert interpolate_string("${TOKEN:?needed}", {"TOKEN": "t"}, "k") == "t"


def test_b18_question_mark_without_message_says_unset_or_empty() -> None:
    with pytest.raises(ConfigError, match="T is empty"):
        interpolate_string("${T:?}", {"T": ""}, "k")
    with pytest.raises(ConfigError, match="T is not set"):
        interpolate_string("${T:?}", {}, "k")


def test_b18_double_dollar_is_a_literal_dollar() -> None:
    assert interpolate_string("price: $$5 and $${NOT_A_VAR}", {}, "k") == (
        "price: $5 and ${NOT_A_VAR}"
    )
    # A lone dollar not followed by { stays as it is.
    assert interpolate_string("cost $5", {}, "k") == "cost $5"


def test_b18_substituted_values_are_not_reinterpolated() -> None:
    assert interpolate_string("${A}", {"A": "${B}", "B": "x"}, "k") == "${B}"


def test_b18_value_with_newline_is_refused() -> None:
    with pytest.raises(ConfigError, match="newline"):
        interpolate_string("${PEM}", {"PEM": "line1\nline2"}, "sink.x.password")
    with pytest.raises(ConfigError, match="newline"):
        interpolate_string("${PEM:-a\nb}", {}, "k")


def test_b18_malformed_references_are_errors() -> None:
    with pytest.raises(ConfigError, match="unterminated"):
        interpolate_string("${OPEN", {}, "k")
    with pytest.raises(ConfigError, match="invalid variable reference"):
        interpolate_string("${1BAD}", {}, "k")
    with pytest.raises(ConfigError, match="invalid variable reference"):
        interpolate_string("${V:x}", {"V": "1"}, "k")


def test_b18_password_with_space_hash_stays_literal() -> None:
    """A ``#`` in a substituted value is not a YAML comment: the value is never re-parsed."""
    env = {"CH_PASSWORD": "s3cret #not-a-comment"}
    assert _name("${CH_PASSWORD}", env) == "s3cret #not-a-comment"


def test_b18_value_no_stays_the_string_no() -> None:
    assert _name("${ANSWER}", {"ANSWER": "no"}) == "no"
    raw = interpolate({"a": ["${ANSWER}", 5, True, None]}, {"ANSWER": "no"})
    assert raw == {"a": ["no", 5, True, None]}


def test_b18_empty_value_stays_an_empty_string_not_null() -> None:
    raw = interpolate({"password": "${PW:-}"}, {})
    assert raw == {"password": ""}


def test_b18_numbers_from_variables_are_decoded_by_the_field_type() -> None:
    text = MINIMAL.format(name="p") + "checkpoint:\n  max_pending_batches: ${PENDING}\n"
    cfg = parse_config(text, env={"PENDING": "64"}, check_connectors=False)
    assert cfg.checkpoint.max_pending_batches == 64


def test_b18_interpolation_error_names_file_line_and_path() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(MINIMAL.format(name="${NOPE}"), file="p.yaml", env={}, check_connectors=False)
    err = info.value
    assert err.path == "pipeline.name"
    assert (err.file, err.line) == ("p.yaml", 3)
    assert str(err).startswith("p.yaml:3:3: pipeline.name: ")


def test_b18_keys_are_not_interpolated() -> None:
    assert interpolate({"${K}": "v"}, {"K": "x"}) == {"${K}": "v"}
