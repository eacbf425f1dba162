"""The public API is small and declared once; the CLI, the API and the config agree on their options."""
from __future__ import annotations

import inspect

import parity
from parity import commands as run
from parity.cli import build_parser
from parity.config import ReportSpec


def test_the_package_exports_exactly_its_public_api():
    assert sorted(parity.__all__) == sorted(["check", "ConfigError", "InputError", "ParityError", "Report",
                                             "UserCodeError", "__version__"])
    for name in parity.__all__:
        assert hasattr(parity, name)


def _subparser(name):
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices[name]


def _flags(name):
    return {a.dest for a in _subparser(name)._actions if a.dest != "help"}


def test_check_flags_match_the_api_keywords():
    api = set(inspect.signature(parity.check).parameters)
    cli_to_api = {"config": "config_path", "out": "out_dir", "runner": "runner", "noise": "noise",
                  "sides_at_once": "sides_at_once", "force": "force", "diff_on": "diff_on"}
    assert _flags("check") == set(cli_to_api)
    assert {cli_to_api[f] for f in _flags("check")} | {"pipeline_options"} == api
    assert set(inspect.signature(run.check).parameters) == api


def test_the_config_report_section_and_the_cli_share_the_noise_option():
    assert "noise" in ReportSpec.__dataclass_fields__
    assert "noise" in _flags("check")


def test_every_contract_command_exists():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    assert {"check", "replay", "diff", "report", "show"} <= set(action.choices)


def test_the_pytest_helper_and_the_beam_module_are_importable():
    from parity import testing

    assert callable(testing.assert_parity)
