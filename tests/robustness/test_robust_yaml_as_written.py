"""Issue 40, item 5: YAML as users write it. YAML 1.2 floats (`1e-6`, the README's own spelling), merge keys and
booleans that are never integers, through `load_config` and the real `parity check`."""
from __future__ import annotations

import pytest

from parity.config import load_config
from parity.errors import ConfigError
from robust_helpers import check, make_project

BASE = "version: 1\ncapture: {path: cap.jsonl}\n"


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "parity.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("spelled, value", [("1e-6", 1e-6), ("1e308", 1e308), ("1e-300", 1e-300),
                                            ("1.0e-6", 1e-6), ("2E-3", 2e-3), (".5", 0.5), ("3", 3.0)])
def test_a_tolerance_written_as_yaml_1_2_writes_floats_is_read_as_that_number(tmp_path, spelled, value):
    config = load_config(_config(tmp_path, BASE + f"sides: {{a: {{}}, b: {{}}}}\ntolerance: {{default: "
                                                  f"{{abs: 0, rel: {spelled}}}}}\n"))
    assert config.tolerance.default.rel == value


def test_a_float_literal_beyond_float64_is_refused_naming_it_not_read_as_infinity(tmp_path):
    path = _config(tmp_path, BASE + "sides: {a: {}, b: {}}\ntolerance: {default: {abs: 1e400}}\n")
    with pytest.raises(ConfigError, match=r"not valid YAML: the number 1e400 \(line 4\) is beyond the float64 range"):
        load_config(path)


def test_merge_keys_share_a_sides_settings_and_a_key_beside_them_overrides(tmp_path):
    text = BASE + ("sides:\n"
                   "  a: &common\n"
                   "    shard: {key: [zone], count: 4}\n"
                   "    window: {type: fixed, size: 1h}\n"
                   "  b:\n"
                   "    <<: *common\n"
                   "    shard: {key: [zone], count: 8}\n")
    config = load_config(_config(tmp_path, text))
    a, b = config.sides
    assert (a.shard.count, b.shard.count) == (4, 8)
    assert a.window == b.window


@pytest.mark.parametrize("version", ["true", "1.0", "'1'"])
def test_a_version_that_is_a_boolean_a_float_or_a_string_is_refused(tmp_path, version):
    path = _config(tmp_path, f"version: {version}\ncapture: {{path: cap.jsonl}}\nsides: {{a: {{}}, b: {{}}}}\n")
    with pytest.raises(ConfigError, match=r"version: unsupported version .*; expected 1"):
        load_config(path)


def test_a_check_whose_tolerance_says_rel_1e_6_runs(tmp_path, capsys):
    project = make_project(tmp_path, config={"tolerance": {"default": {"abs": 0, "rel": "REL"}}})
    with open(project.config, encoding="utf-8") as handle:
        text = handle.read().replace("rel: REL", "rel: 1e-6")
    with open(project.config, "w", encoding="utf-8") as handle:
        handle.write(text)
    code, _, errors = check(project, capsys)
    assert code == 0, errors
    assert project.report()["verdict"] == "parity"
