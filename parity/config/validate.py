"""Checks of one YAML value each, raising a ConfigError that names the file, the field path, the bad value
and what would be accepted."""
from __future__ import annotations

import math
import re
import reprlib
from typing import Any

from parity.choices import US_PER_UNIT
from parity.config.model import FILE_REF, REF, Ref
from parity.errors import ConfigError, UserCodeError

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)?\s*$")
_DURATION_US = {**US_PER_UNIT, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}
_MAX_DURATION_US = 2**63 - 1


class Ctx:
    """Where we are in the YAML document, for error messages."""

    def __init__(self, file: str, base_dir: str, check_refs: bool = True):
        self.file = file
        self.base_dir = base_dir
        self.check_refs = check_refs  # import each `module:attr` reference and check it is a callable

    def fail(self, path: str, problem: str) -> ConfigError:
        if not path:  # the document itself: ": expected ..." named nothing
            return ConfigError(f"{self.file}: the config as a whole: {problem}")
        return ConfigError(f"{self.file}: {path}: {problem}")

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping with keys {', '.join(allowed)}, "
                                  f"got {_show(value)}")
        for key in value:
            if key not in allowed:
                raise self.fail(f"{path}.{key}" if path else str(key),
                                f"unknown field '{key}'; expected one of {', '.join(allowed)}")
        return value

    def choice(self, value: Any, path: str, choices: tuple[str, ...], what: str) -> str:
        if value not in choices:
            raise self.fail(path, f"unknown {what} {_show(value)}; expected one of {', '.join(choices)}")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"expected a non-empty string, got {_show(value)}")
        return value

    def integer(self, value: Any, path: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_show(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"expected an integer >= {minimum}, got {_show(value)}")
        return value

    def number(self, value: Any, path: str, minimum: float | None = None,
               maximum: float | None = None, what: str = "") -> float:
        """A number in [minimum, maximum]; NaN never (every comparison with it is false: a NaN threshold
        would switch its check off). `what` says in the message why the bounds are what they are."""
        accepted = "a number" if minimum is None and maximum is None else \
            f"a number >= {minimum:g}" if maximum is None else \
            f"a number <= {maximum:g}" if minimum is None else f"a number from {minimum:g} to {maximum:g}"
        why = f" ({what})" if what else ""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"expected {accepted}{why}, got {_show(value)}")
        if isinstance(value, float) and math.isnan(value):
            raise self.fail(path, f"expected {accepted}{why}, got NaN (.nan), which would switch the check off")
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range
            number = math.inf if value > 0 else -math.inf
        if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
            raise self.fail(path, f"expected {accepted}{why}, got {_show(value)}")
        return number

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false, got {_show(value)}")
        return value

    def fields(self, value: Any, path: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise self.fail(path, f"expected a list of field names, got {_show(value)}")
        return tuple(value)

    def duration_us(self, value: Any, path: str, allow_negative: bool = False) -> int:
        us: int | None = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                us = round(value * 1_000_000)
            except (ValueError, OverflowError):  # NaN, an infinity, an int beyond the float range
                us = None
        elif isinstance(value, str):
            match = _DURATION.match(value)
            if match:
                us = round(float(match.group(1)) * _DURATION_US[match.group(2) or "s"])
        if us is None or (us < 0 and not allow_negative):
            raise self.fail(path, f"bad duration {_show(value)}; expected seconds (a number) "
                                  f"or a string like 90s, 15m, 1h, 1d")
        if abs(us) > _MAX_DURATION_US:
            raise self.fail(path, f"bad duration {_show(value)}; expected at most {_MAX_DURATION_US // 10**6:,} s "
                                  f"(Beam's timestamps are 64-bit microseconds)")
        return us

    def ref(self, value: Any, path: str, check: bool = True) -> Ref:
        if not isinstance(value, str) or not (REF.match(value) or FILE_REF.match(value)):
            raise self.fail(path, f"expected a 'module:attr' reference, got {_show(value)}; a module file by "
                                  f"path works too: 'path/to/module_file.py:attr'")
        ref = Ref(value, self.base_dir)
        if check and self.check_refs:
            try:
                obj = ref.resolve()
            except UserCodeError as exc:
                raise UserCodeError(f"{self.file}: {path}: {exc}") from exc
            if not callable(obj):
                raise self.fail(path, f"'{value}' is a {type(obj).__name__}, expected a callable")
        return ref


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 3, 4, 6, 6, 6
_REPR.maxstring, _REPR.maxlong, _REPR.maxother = 80, 40, 80


def _show(value: Any) -> str:
    """The value for a message, at most 80 characters, in time and memory bounded whatever its size (a YAML
    alias can make a list of billions of elements, an int can have 100,000 digits: never `repr()` it whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        text = f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    else:
        try:
            text = _REPR.repr(value)
        except ValueError:  # an int nested in it beyond Python's 4,300-digit str() limit
            text = f"a {type(value).__name__} holding a very long integer"
    return text if len(text) <= 80 else text[:77] + "..."

