"""The configuration object: typed options, AMNET_* variables, precedence, errors."""

import pytest

from amnet import Config, ConfigError
from amnet._config import OPTIONS, parse_size


@pytest.mark.parametrize("text,value", [
    ("4096", 4096), ("64K", 64 << 10), ("64k", 64 << 10), ("64M", 64 << 20),
    ("64MiB", 64 << 20), ("64MB", 64 << 20), ("1g", 1 << 30), (" 2 G ", 2 << 30), (8192, 8192),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "M", "1.5M", "-4K", "12Q", "lots"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_defaults():
    cfg = Config.resolve(env={})
    assert cfg.segment_size == 64 << 20
    assert set(cfg) == set(OPTIONS)


def test_precedence_flag_over_env_over_default():
    assert Config.resolve(env={"AMNET_SEGMENT_SIZE": "1M"}).segment_size == 1 << 20
    cfg = Config.resolve(env={"AMNET_SEGMENT_SIZE": "1M"}, overrides={"segment_size": "2M"})
    assert cfg["segment_size"] == 2 << 20


def test_unknown_variable_is_an_error_naming_it():
    with pytest.raises(ConfigError, match="unknown environment variable AMNET_SEGMENT_SIZ"):
        Config.resolve(env={"AMNET_SEGMENT_SIZ": "1M"})


def test_internal_variables_are_not_options():
    Config.resolve(env={"AMNET_JOB_SPEC": "y"})


@pytest.mark.parametrize("env,source", [
    ({"AMNET_SEGMENT_SIZE": "huge"}, "AMNET_SEGMENT_SIZE"),
    ({"AMNET_SEGMENT_SIZE": "100"}, "AMNET_SEGMENT_SIZE"),
])
def test_bad_values_name_the_option_and_the_accepted_values(env, source):
    with pytest.raises(ConfigError, match=f"segment_size \\(from {source}\\): expected a size"):
        Config.resolve(env=env)


def test_unknown_override():
    with pytest.raises(ConfigError, match="unknown amnet option 'segmentsize'"):
        Config.resolve(env={}, overrides={"segmentsize": 1})


def test_config_is_read_only():
    cfg = Config.resolve(env={})
    with pytest.raises(TypeError):
        cfg["segment_size"] = 1  # type: ignore[index]


@pytest.mark.parametrize("value", [str(2**63 - 1), str(2**63), str(2**62), "257T", 2**64,
                                   (1 << 48) + 1])
def test_a_segment_too_large_for_the_c_side_is_refused_naming_the_limit(value):
    """2**63 - 1 and more passed validation and every rank then died with OverflowError."""
    for how in ("env", "kwarg"):
        with pytest.raises(ConfigError, match=r"bad value .* for segment_size \(from "
                           r"(AMNET_SEGMENT_SIZE|segment_size=)\): expected a size in bytes "
                           r"from 4096 to 256T \(2\*\*48\)"):
            if how == "env":
                Config.resolve(env={"AMNET_SEGMENT_SIZE": str(value)})
            else:
                Config.resolve(env={}, overrides={"segment_size": value})
    assert Config.resolve(env={"AMNET_SEGMENT_SIZE": "256T"}).segment_size == 1 << 48


def test_no_integer_option_takes_a_value_past_its_range():
    """Every option that takes a number has an upper bound (an unbounded one overflows a C
    integer in the ranks): a value of 2**63 or more is refused for each."""
    from amnet._config import OPTIONS

    numeric = [o for o in OPTIONS.values()
               if isinstance(o.default, (int, float)) and not isinstance(o.default, bool)]
    assert {o.name for o in numeric} >= {"segment_size", "max_medium", "pshm_network_depth"}
    for opt in numeric:
        for value in (str(2**63), str(2**64 + 1), "inf", "nan"):
            with pytest.raises(ConfigError, match=f"for {opt.name} "):
                Config.resolve(env={opt.env: value})
