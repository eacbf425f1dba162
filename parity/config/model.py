"""What a parity config says, as frozen dataclasses: the values `load_config` returns.

A side's stages are described by the stages' own specs (`TimestampSpec`, `WindowSpec`, `ShardSpec`, `CoderSpec`,
`SeedSpec`, `TransformSpec`, `ModelSpec`, each in its `parity.stages` module): the config assembles them. A user function, WindowFn
or coder factory in them is a `Ref` (`module:attr`), which the replay imports when it builds the stage.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parity.capture.schema import FieldType
from parity.choices import FORMATS
from parity.config import origin as origins
from parity.console.collector import loading
from parity.errors import ConfigError, UnimportableCode, UserCodeError
from parity.stages.model import ModelSpec
from parity.stages.seed import SeedSpec
from parity.stages.shard import ShardSpec, aggregate_type
from parity.stages.timestamp import TimestampSpec
from parity.stages.transform import TransformSpec
from parity.stages.window import WindowSpec

if TYPE_CHECKING:  # the coder stage imports Beam: a config loads without it unless it has a coder
    from parity.stages.coder import CoderSpec

REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
# a module file by path, as TFX's `module_file` names one: `path/to/taxi_utils.py:preprocessing_fn`
FILE_REF = re.compile(r"^(?P<file>[^:]+\.py):(?P<attr>[A-Za-z_][\w.]*)$")

# Bounds on what a config may make parity hold or do (the file's own bounds: parity.config.document).
MAX_SCHEMA_FIELDS = 10_000            # fields of an inline capture.schema


@dataclass(frozen=True)
class Ref:
    """A `module:attr` reference, imported with the config's folder first on sys.path: what the stages hold as a
    `parity.stages.reference.Reference`."""

    text: str
    base_dir: str
    # the process that made it (`host:pid`): an import that fails in another one, an SDK worker, says so
    origin: str = field(default_factory=origins.here, compare=False, repr=False)

    def resolve(self) -> Any:
        file_ref = FILE_REF.match(self.text)
        module_name, attr = (None, file_ref.group("attr")) if file_ref else self.text.split(":", 1)
        if self.base_dir not in sys.path:
            sys.path.insert(0, self.base_dir)
        _refuse_special_module(self.text, self.base_dir, file_ref.group("file") if file_ref else module_name)
        try:
            with loading():  # a TFX module imports TensorFlow: seconds of objects that all live on
                if file_ref:
                    obj: Any = _import_file(os.path.join(self.base_dir, file_ref.group("file")))
                else:
                    obj = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except SystemExit as exc:  # a module that exits on import would end parity with its code, unnamed
            worker = origins.on_worker(self.origin, self.base_dir)
            if worker:
                raise UnimportableCode(f"cannot import '{self.text}' {worker}: the module called sys.exit({exc.code!r}) "
                                    f"while it was imported there") from exc
            raise UnimportableCode(
                f"cannot import '{self.text}' (searched {self.base_dir} first): the module called "
                f"sys.exit({exc.code!r}) while it was imported; a module a config names must import without "
                f"exiting (guard its script code with `if __name__ == \"__main__\":`)") from exc
        except Exception as exc:  # any import-time failure of user code
            last = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
            worker = origins.on_worker(self.origin, self.base_dir)
            if worker:  # the client imported it when it checked the config: this worker lacks something
                raise UnimportableCode(f"cannot import '{self.text}' {worker}: {last}; {origins.WORKER_FIX}") from exc
            raise UnimportableCode(
                f"cannot import '{self.text}' (searched {self.base_dir} first): {last}; "
                f"check the module name and that it imports on its own") from exc
        return obj


def _refuse_special_module(reference: str, base_dir: str, name: str) -> None:
    """Refuses a module the config names that is a FIFO, device or socket beside the config, before importing
    it: Python's import would skip it and say "No module named", and importing it by file path would block."""
    from parity.storage.files import special_kind

    top = name.split(".")[0] if not name.endswith(".py") else name
    candidates = [os.path.join(base_dir, top)] if top.endswith(".py") else [
        os.path.join(base_dir, top + ".py"), os.path.join(base_dir, top, "__init__.py")]
    for candidate in candidates:
        special = special_kind(candidate)
        if special is not None:
            raise UserCodeError(f"cannot import '{reference}': {candidate} is {special}, not a regular file; a "
                                f"module a config names must be a Python file")


def _import_file(path: str) -> Any:
    """Imports a module file by path, as TFX imports a `module_file`: under its file name (so that Beam pickles
    its functions by reference), with its folder on sys.path (so that it imports its neighbours)."""
    import importlib.util

    path = os.path.abspath(path)
    name = os.path.splitext(os.path.basename(path))[0]
    loaded = sys.modules.get(name)
    if loaded is not None:
        if os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
            return loaded
        raise ImportError(f"a module named {name!r} is already imported from {getattr(loaded, '__file__', '?')}; "
                          f"rename {path} or refer to it as module:attr")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no module file {path}")
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException:
        del sys.modules[name]
        raise
    return module


@dataclass(frozen=True)
class CaptureSpec:
    path: str
    format: str | None
    key: tuple[str, ...] | None
    schema: tuple[tuple[str, FieldType], ...] | None
    tz: str = "UTC"
    max_quarantined: float = 0.01      # a side stops (exit 2) when more than this share is quarantined
    max_record_bytes: int = 16 << 20   # a record whose canonical form is larger is quarantined
    # `schema` given as a TFMD schema: its text, from which a `tft` side's feature spec comes (as in TFX)
    tfmd_text: str | None = None
    # and the schema.pbtxt it was read from: an input of the run, which `--out` may not hold
    tfmd_path: str | None = None

    @property
    def schema_dict(self) -> dict[str, FieldType] | None:
        return dict(self.schema) if self.schema is not None else None


@dataclass(frozen=True)
class SideConfig:
    name: str
    capture: CaptureSpec
    timestamp: TimestampSpec | None
    window: WindowSpec | None
    shard: ShardSpec | None
    coder: CoderSpec | None
    seed: SeedSpec | None
    transform: TransformSpec | None
    base_dir: str
    model: ModelSpec | None = None  # the `model` stage (contract section 8): the side's own or the top-level one


@dataclass(frozen=True)
class Tolerance:
    abs: float = 0.0
    rel: float = 0.0


@dataclass(frozen=True)
class ToleranceSpec:
    default: Tolerance = Tolerance()
    features: tuple[tuple[str, Tolerance], ...] = ()
    max_diverged: int = 0
    max_unpaired: int = 0  # records on one side only (left_only + right_only) the verdict "parity" allows

    def for_feature(self, name: str) -> Tolerance:
        return dict(self.features).get(name, self.default)


@dataclass(frozen=True)
class ReportSpec:
    examples: int = 10
    redact: bool = False
    noise: bool = False


@dataclass(frozen=True)
class Config:
    path: str
    base_dir: str
    name: str
    sides: tuple[SideConfig, SideConfig]
    tolerance: ToleranceSpec = field(default_factory=ToleranceSpec)
    report: ReportSpec = field(default_factory=ReportSpec)

    def side(self, name: str) -> SideConfig:
        for side in self.sides:
            if side.name == name:
                return side
        raise ConfigError(f"{self.path}: sides: no side named '{name}'; "
                          f"expected one of {', '.join(s.name for s in self.sides)}")



def capture_field_types(side: SideConfig) -> dict[str, FieldType] | None:
    """Field types of the records after the shard stage: the capture schema plus the aggregates."""
    schema = side.capture.schema_dict
    if schema is None:
        return None
    types = dict(schema)
    if side.shard is not None:
        for agg in side.shard.aggregates:
            types[agg.name] = aggregate_type(agg, schema)
    return types
