"""YAML config -> frozen dataclasses. The only place YAML is parsed.

Every error names the file, the field path, the bad value and what would be accepted, and exits 2.
"""
from __future__ import annotations

import importlib
import math
import os
import re
import reprlib
import sys
import zoneinfo
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import yaml

from parity.errors import ConfigError, UserCodeError, first_line
from parity.capture.schema import FieldType, parse_schema, parse_type

STAGES = ("input", "window", "shard", "coder", "seed", "transform")
FORMATS = ("jsonl", "tfrecord", "parquet", "csv")
TIME_UNITS = ("s", "ms", "us", "ns", "iso8601")
WINDOW_TYPES = ("fixed", "sliding", "session", "global")
SHARD_HASHES = ("xxh3", "crc32", "md5", "python")
AGGREGATE_OPS = ("count", "sum", "mean", "min", "max", "distinct_count")
AGGREGATE_COMBINES = ("exact", "sequential")
CODER_TYPES = ("json", "tfexample", "avro", "pickle", "arrow")
SEED_OPS = ("sample", "split")
SEED_HASHES = ("xxh3", "md5", "crc32", "python")

_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)?\s*$")
_DURATION_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000,
                "d": 86_400_000_000}
_MAX_DURATION_US = 2**63 - 1
_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
# a module file by path, as TFX's `module_file` names one: `path/to/taxi_utils.py:preprocessing_fn`
_FILE_REF = re.compile(r"^(?P<file>[^:]+\.py):(?P<attr>[A-Za-z_][\w.]*)$")
# Side names become folder names under --out (sides/<name>, noise/<name>): nothing that could leave it.
_SIDE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")

# Bounds on what a config may make parity hold or do: a config is a few kilobytes written by hand, so these
# only stop hostile or broken files (a YAML "billion laughs", a generated 5 MB schema) before they cost memory.
MAX_CONFIG_BYTES = 1 << 20            # the file's size
MAX_CONFIG_NODES = 100_000            # YAML nodes once every alias is expanded
MAX_SCHEMA_FIELDS = 10_000            # fields of an inline capture.schema
MAX_WINDOWS_PER_RECORD = 10_000       # windows a sliding window puts one record in (size / period)


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, refusing a key repeated in one mapping (PyYAML would keep the last one silently) and a
    document whose aliases expand to more than MAX_CONFIG_NODES nodes (a "billion laughs")."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            expanded = _expanded_nodes(node, MAX_CONFIG_NODES)
            if expanded > MAX_CONFIG_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"the document's aliases (*name) expand to more than {MAX_CONFIG_NODES:,} "
                                f"values; a parity config needs far fewer: write the repeated parts out or "
                                f"remove the aliases", node.start_mark)
        return node


def _expanded_nodes(root: yaml.Node, limit: int) -> int:
    """How many nodes the YAML graph under `root` holds with every alias expanded (a node an alias shares is
    counted at each use), up to `limit + 1`; a recursive alias (`&a [*a]`) counts as `limit + 1`. Iterative,
    each distinct node visited once."""
    sizes: dict[int, int] = {}
    opened: set[int] = set()  # nodes whose children are being counted: meeting one again is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_counted = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_counted:
            opened.discard(id(node))
            sizes[id(node)] = min(limit + 1, 1 + sum(sizes[id(child)] for child in children))
            continue
        if id(node) in opened:
            return limit + 1
        if not children:
            sizes[id(node)] = 1
            continue
        opened.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            repeated = key in seen
        except TypeError:  # an unhashable key: construct_mapping reports it
            break
        if repeated:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {key_node.start_mark.line + 1}); keep one", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


@dataclass(frozen=True)
class Ref:
    """A `module:attr` reference, imported with the config's folder first on sys.path."""

    text: str
    base_dir: str

    def resolve(self) -> Any:
        file_ref = _FILE_REF.match(self.text)
        module_name, attr = (None, file_ref.group("attr")) if file_ref else self.text.split(":", 1)
        if self.base_dir not in sys.path:
            sys.path.insert(0, self.base_dir)
        try:
            if file_ref:
                obj: Any = _import_file(os.path.join(self.base_dir, file_ref.group("file")))
            else:
                obj = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except SystemExit as exc:  # a module that exits on import would end parity with its code, unnamed
            raise UserCodeError(
                f"cannot import '{self.text}' (searched {self.base_dir} first): the module called "
                f"sys.exit({exc.code!r}) while it was imported; a module a config names must import without "
                f"exiting (guard its script code with `if __name__ == \"__main__\":`)") from exc
        except Exception as exc:  # any import-time failure of user code
            last = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
            raise UserCodeError(
                f"cannot import '{self.text}' (searched {self.base_dir} first): {last}; "
                f"check the module name and that it imports on its own") from exc
        return obj


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

    @property
    def schema_dict(self) -> dict[str, FieldType] | None:
        return dict(self.schema) if self.schema is not None else None


@dataclass(frozen=True)
class TimestampSpec:
    field: str | None
    unit: str
    tz: str
    function: Ref | None


@dataclass(frozen=True)
class LatenessSpec:
    arrival: str
    out_of_orderness_us: int
    allowed_us: int


@dataclass(frozen=True)
class WindowSpec:
    type: str  # fixed | sliding | session | global | windowfn
    size_us: int = 0
    period_us: int = 0
    offset_us: int = 0
    gap_us: int = 0
    windowfn: Ref | None = None
    lateness: LatenessSpec | None = None


@dataclass(frozen=True)
class AggregateSpec:
    name: str
    op: str
    field: str | None
    combine: str = "exact"  # exact | sequential (float sum/mean in event-time order, like a streaming combiner)


@dataclass(frozen=True)
class ShardSpec:
    key_fields: tuple[str, ...] | None
    key_function: Ref | None
    count: int
    hash: str
    aggregates: tuple[AggregateSpec, ...]


@dataclass(frozen=True)
class CoderConfig:
    type: str | None
    factory: Ref | None
    options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class SeedOpConfig:
    name: str
    op: str  # sample | split | function
    rate: float = 0.0
    buckets: tuple[tuple[str, int], ...] = ()
    hash: str = "xxh3"
    function: Ref | None = None


@dataclass(frozen=True)
class SeedConfig:
    value: int | str | None
    ops: tuple[SeedOpConfig, ...]


@dataclass(frozen=True)
class TransformSpec:
    kind: str  # tft | saved | python
    ref: Ref | None = None
    path: str | None = None
    from_side: str | None = None
    custom_config: str | None = None  # tft: the JSON text of TFX Transform's `custom_config` (a frozen mapping)


@dataclass(frozen=True)
class SideConfig:
    name: str
    capture: CaptureSpec
    timestamp: TimestampSpec | None
    window: WindowSpec | None
    shard: ShardSpec | None
    coder: CoderConfig | None
    seed: SeedConfig | None
    transform: TransformSpec | None
    base_dir: str


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


class _Ctx:
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
        if not isinstance(value, str) or not (_REF.match(value) or _FILE_REF.match(value)):
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


def load_config(path: str | os.PathLike, check_refs: bool = True) -> Config:
    """Loads and validates a parity config file (YAML, `version: 1`).

    `check_refs=False` leaves its `module:attr` references unimported (the same Config, with every other
    check made): importing a TFT module takes seconds, which `parity check` spends after starting its child.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_CONFIG_BYTES + 1)
            if len(text) > MAX_CONFIG_BYTES:
                raise ConfigError(f"{path}: the config is larger than {MAX_CONFIG_BYTES >> 20} MiB; a parity "
                                  f"config is a few kilobytes: keep large schemas out of it (capture.schema "
                                  f"may name a schema file)")
        document = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no object construction
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such config file; pass the path of a parity YAML config") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {first_line(exc)}") from exc
    except RecursionError as exc:  # PyYAML composes nested collections recursively
        raise ConfigError(f"{path}: not a usable YAML config: its lists or mappings are nested too deeply for "
                          f"Python's recursion limit ({sys.getrecursionlimit():,}); a parity config is a few "
                          f"levels deep") from exc
    except ValueError as exc:  # PyYAML's int() of an integer beyond Python's 4,300-digit limit
        raise ConfigError(f"{path}: not a usable YAML config: {first_line(exc)}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config: {exc.strerror}") from exc
    base_dir = os.path.dirname(os.path.abspath(path))
    ctx = _Ctx(path, base_dir, check_refs)
    if document is None:
        raise ConfigError(f"{path}: the config is empty (or only comments); a parity config is a YAML mapping "
                          f"with version: 1, capture and two sides (see the README's config reference)")
    doc = ctx.mapping(document, "", ("version", "name", "capture", "sides", "tolerance", "report"))
    if doc.get("version") != 1:
        raise ctx.fail("version", f"unsupported version {_show(doc.get('version'))}; expected 1")
    name = doc.get("name", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(name, str):
        raise ctx.fail("name", f"expected a string, got {_show(name)}")
    top_capture = doc.get("capture")
    if top_capture is not None:
        ctx.mapping(top_capture, "capture", _CAPTURE_KEYS)
    sides_doc = doc.get("sides")
    if not isinstance(sides_doc, dict) or len(sides_doc) != 2:
        raise ctx.fail("sides", f"expected exactly two named sides (e.g. offline, production), "
                                f"got {_show(sides_doc)}")
    for side_name in sides_doc:
        if not isinstance(side_name, str) or not _SIDE_NAME.match(side_name):
            raise ctx.fail(f"sides.{side_name}", f"bad side name {_show(side_name)}; side names are folder names "
                                                 f"under --out: letters, digits, '_', '-', '.' (not first), "
                                                 f"at most 64, e.g. offline, production")
    sides = tuple(_side(ctx, str(n), body, top_capture) for n, body in sides_doc.items())
    side_names = [s.name for s in sides]
    for side in sides:
        t = side.transform
        if t is not None and t.from_side is not None and (t.from_side not in side_names or
                                                           t.from_side == side.name):
            raise ctx.fail(f"sides.{side.name}.transform.saved.from_side",
                           f"{_show(t.from_side)} is not the other side; expected one of "
                           f"{', '.join(n for n in side_names if n != side.name)}")
    return Config(path=path, base_dir=base_dir, name=name, sides=sides,  # type: ignore[arg-type]
                  tolerance=_tolerance(ctx, doc.get("tolerance")),
                  report=_report(ctx, doc.get("report")))


_CAPTURE_KEYS = ("path", "format", "key", "schema", "tz", "max_quarantined", "max_record_bytes")
_SIDE_KEYS = ("capture", "timestamp", "window", "shard", "coder", "seed", "transform")


def _capture(ctx: _Ctx, top: dict | None, override: Any, path: str) -> CaptureSpec:
    merged = dict(top or {})
    if override is not None:
        merged.update(ctx.mapping(override, f"{path}.capture", _CAPTURE_KEYS))
    where = f"{path}.capture" if override is not None else "capture"
    if "path" not in merged:
        raise ctx.fail(f"{where}.path", "missing; give the captured records' file or glob")
    cap_path = ctx.string(merged["path"], f"{where}.path")
    fmt = merged.get("format")
    if fmt is not None:
        ctx.choice(fmt, f"{where}.format", FORMATS, "format")
    key = ctx.fields(merged["key"], f"{where}.key") if merged.get("key") is not None else None
    schema = None
    tfmd_text = None
    if isinstance(merged.get("schema"), str):  # a TFMD schema.pbtxt, or SchemaGen's output folder
        from parity.capture import tfmd

        location = os.path.join(ctx.base_dir, os.path.expanduser(merged["schema"]))
        try:
            loaded = tfmd.load(location)
        except tfmd.TFMDError as exc:
            raise ctx.fail(f"{where}.schema", f"{exc}") from exc
        schema, tfmd_text = loaded.fields, loaded.text
    elif merged.get("schema") is not None:
        raw = merged["schema"]
        if not isinstance(raw, dict) or not raw:
            raise ctx.fail(f"{where}.schema", f"expected a mapping of field to type, or the path of a TFMD "
                                              f"schema.pbtxt (or SchemaGen's output folder), got {_show(raw)}")
        if len(raw) > MAX_SCHEMA_FIELDS:
            raise ctx.fail(f"{where}.schema", f"{len(raw):,} fields, above the limit of {MAX_SCHEMA_FIELDS:,}; "
                                              f"keep the fields the pipelines read")
        for field_name, type_text in raw.items():
            if not isinstance(type_text, str):
                raise ctx.fail(f"{where}.schema.{field_name}", f"expected a type string such as int64 or "
                                                               f"list<string>, got {_show(type_text)}")
            try:
                parse_type(type_text)
            except ValueError as exc:
                raise ctx.fail(f"{where}.schema.{field_name}", str(exc)) from exc
        schema = tuple(parse_schema({str(k): str(v) for k, v in raw.items()}).items())
    tz = _time_zone(ctx, merged.get("tz", "UTC"), f"{where}.tz")
    max_quarantined = ctx.number(merged.get("max_quarantined", 0.01), f"{where}.max_quarantined", 0.0, 1.0,
                                 what="a share of the side's records")
    max_record_bytes = ctx.integer(merged.get("max_record_bytes", 16 << 20), f"{where}.max_record_bytes",
                                   minimum=1)
    return CaptureSpec(path=cap_path, format=fmt, key=key, schema=schema, tz=tz,
                       max_quarantined=max_quarantined, max_record_bytes=max_record_bytes, tfmd_text=tfmd_text)


def _time_zone(ctx: _Ctx, value: Any, path: str) -> str:
    """An IANA time zone name that this machine's zone database knows (e.g. UTC, America/Chicago)."""
    tz = ctx.string(value, path)
    try:
        zoneinfo.ZoneInfo(tz)
    except Exception as exc:  # ZoneInfoNotFoundError, or ValueError for a name that is not a zone key
        raise ctx.fail(path, f"unknown time zone {_show(tz)}; expected an IANA name such as UTC, "
                             f"Europe/Berlin or America/Chicago") from exc
    return tz


def _side(ctx: _Ctx, name: str, body: Any, top_capture: dict | None) -> SideConfig:
    path = f"sides.{name}"
    body = ctx.mapping(body if body is not None else {}, path, _SIDE_KEYS)
    if top_capture is None and body.get("capture") is None:
        raise ctx.fail(f"{path}.capture", "missing; give a top-level capture or one per side")
    capture = _capture(ctx, top_capture, body.get("capture"), path)
    return SideConfig(
        name=name,
        capture=capture,
        timestamp=_timestamp(ctx, body.get("timestamp"), f"{path}.timestamp", capture.tz),
        window=_window(ctx, body.get("window"), f"{path}.window"),
        shard=_shard(ctx, body.get("shard"), f"{path}.shard"),
        coder=_coder(ctx, body.get("coder"), f"{path}.coder"),
        seed=_seed(ctx, body.get("seed"), f"{path}.seed"),
        transform=_transform(ctx, body.get("transform"), f"{path}.transform"),
        base_dir=ctx.base_dir,
    )


def _timestamp(ctx: _Ctx, body: Any, path: str, capture_tz: str = "UTC") -> TimestampSpec | None:
    """`capture_tz` (the side's `capture.tz`) is the zone of naive ISO 8601 times unless `timestamp.tz` says."""
    if body is None:
        return None
    body = ctx.mapping(body, path, ("field", "unit", "tz", "function"))
    if "function" in body:
        if "field" in body:
            raise ctx.fail(path, "give either 'field' (with 'unit') or 'function', not both")
        return TimestampSpec(None, "s", "UTC", ctx.ref(body["function"], f"{path}.function"))
    if "field" not in body:
        raise ctx.fail(f"{path}.field", "missing; name the event-time field or give 'function'")
    unit = ctx.choice(body.get("unit", "s"), f"{path}.unit", TIME_UNITS, "time unit")
    tz = _time_zone(ctx, body["tz"], f"{path}.tz") if "tz" in body else capture_tz
    return TimestampSpec(ctx.string(body["field"], f"{path}.field"), unit, tz, None)


def _window(ctx: _Ctx, body: Any, path: str) -> WindowSpec | None:
    if body is None:
        return None
    body = ctx.mapping(body, path, ("type", "size", "period", "offset", "gap", "windowfn", "lateness"))
    lateness = None
    if body.get("lateness") is not None:
        late = ctx.mapping(body["lateness"], f"{path}.lateness",
                           ("arrival", "out_of_orderness", "allowed"))
        if "arrival" not in late:
            raise ctx.fail(f"{path}.lateness.arrival", "missing; name the arrival-time field")
        lateness = LatenessSpec(
            arrival=ctx.string(late["arrival"], f"{path}.lateness.arrival"),
            out_of_orderness_us=ctx.duration_us(late.get("out_of_orderness", 0),
                                                f"{path}.lateness.out_of_orderness"),
            allowed_us=ctx.duration_us(late.get("allowed", 0), f"{path}.lateness.allowed"))
    if "windowfn" in body:
        extra = set(body) - {"windowfn", "lateness"}
        if extra:
            raise ctx.fail(path, f"'windowfn' replaces {', '.join(sorted(extra))}; remove them")
        return WindowSpec("windowfn", windowfn=ctx.ref(body["windowfn"], f"{path}.windowfn"),
                          lateness=lateness)
    kind = ctx.choice(body.get("type"), f"{path}.type", WINDOW_TYPES, "window type")
    needs = {"fixed": ("size",), "sliding": ("size", "period"), "session": ("gap",), "global": ()}
    allowed = {"fixed": ("size", "offset"), "sliding": ("size", "period", "offset"),
               "session": ("gap",), "global": ()}
    for key in needs[kind]:
        if key not in body:
            raise ctx.fail(f"{path}.{key}", f"missing; a {kind} window needs {', '.join(needs[kind])}")
    for key in ("size", "period", "offset", "gap"):
        if key in body and key not in allowed[kind]:
            raise ctx.fail(f"{path}.{key}", f"not used by a {kind} window; expected only "
                                            f"{', '.join(allowed[kind]) or 'type'}")
    spec = WindowSpec(
        kind,
        size_us=ctx.duration_us(body["size"], f"{path}.size") if "size" in body else 0,
        period_us=ctx.duration_us(body["period"], f"{path}.period") if "period" in body else 0,
        offset_us=ctx.duration_us(body.get("offset", 0), f"{path}.offset"),
        gap_us=ctx.duration_us(body["gap"], f"{path}.gap") if "gap" in body else 0,
        lateness=lateness)
    for key, value in (("size", spec.size_us), ("period", spec.period_us), ("gap", spec.gap_us)):
        if key in needs[kind] and value <= 0:
            raise ctx.fail(f"{path}.{key}", f"expected a positive duration, got {_show(body[key])}")
    if kind == "sliding":
        per_record = -(-spec.size_us // spec.period_us)
        if per_record > MAX_WINDOWS_PER_RECORD:
            raise ctx.fail(path, f"a sliding window of size {_show(body['size'])} every {_show(body['period'])} "
                                 f"puts each record in {per_record:,} windows, above the limit of "
                                 f"{MAX_WINDOWS_PER_RECORD:,} per record; make the period longer or the size "
                                 f"shorter")
    return spec


def _shard(ctx: _Ctx, body: Any, path: str) -> ShardSpec | None:
    if body is None:
        return None
    body = ctx.mapping(body, path, ("key", "count", "hash", "aggregates"))
    key_fields, key_fn = None, None
    key = body.get("key")
    if isinstance(key, dict):
        ctx.mapping(key, f"{path}.key", ("function",))
        key_fn = ctx.ref(key.get("function"), f"{path}.key.function")
    elif key is not None:
        key_fields = ctx.fields(key, f"{path}.key")
    aggregates = []
    raw_aggs = body.get("aggregates") or {}
    if not isinstance(raw_aggs, dict):
        raise ctx.fail(f"{path}.aggregates", f"expected a mapping of name to {{op, field}}, "
                                             f"got {_show(raw_aggs)}")
    for agg_name, agg in raw_aggs.items():
        agg_path = f"{path}.aggregates.{agg_name}"
        agg = ctx.mapping(agg, agg_path, ("op", "field", "combine"))
        op = ctx.choice(agg.get("op"), f"{agg_path}.op", AGGREGATE_OPS, "aggregate op")
        fld = agg.get("field")
        if op != "count" and fld is None:
            raise ctx.fail(f"{agg_path}.field", f"missing; op '{op}' needs the field it aggregates")
        combine = ctx.choice(agg.get("combine", "exact"), f"{agg_path}.combine", AGGREGATE_COMBINES, "combine")
        if combine == "sequential" and op not in ("sum", "mean"):
            raise ctx.fail(f"{agg_path}.combine", f"'sequential' applies to sum and mean, not '{op}'")
        aggregates.append(AggregateSpec(str(agg_name), op,
                                        ctx.string(fld, f"{agg_path}.field") if fld is not None else None,
                                        combine))
    return ShardSpec(
        key_fields=key_fields, key_function=key_fn,
        count=ctx.integer(body.get("count", 1), f"{path}.count", minimum=1),
        hash=ctx.choice(body.get("hash", "xxh3"), f"{path}.hash", SHARD_HASHES, "hash"),
        aggregates=tuple(aggregates))


def _coder(ctx: _Ctx, body: Any, path: str) -> CoderConfig | None:
    if body is None:
        return None
    body = ctx.mapping(body, path, ("type", "coder", "int_as_double"))
    if "coder" in body:
        if "type" in body:
            raise ctx.fail(path, "give either 'type' or 'coder' (a module:factory), not both")
        return CoderConfig(None, ctx.ref(body["coder"], f"{path}.coder"))
    kind = ctx.choice(body.get("type"), f"{path}.type", CODER_TYPES, "coder")
    options = []
    if "int_as_double" in body:
        if kind != "json":
            raise ctx.fail(f"{path}.int_as_double", "only the json coder takes int_as_double")
        options.append(("int_as_double", ctx.boolean(body["int_as_double"], f"{path}.int_as_double")))
    return CoderConfig(kind, None, tuple(options))


def _seed(ctx: _Ctx, body: Any, path: str) -> SeedConfig | None:
    if body is None:
        return None
    body = ctx.mapping(body, path, ("value", "ops"))
    value = body.get("value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, str))):
        raise ctx.fail(f"{path}.value", f"expected an integer or string seed (or null for unseeded), "
                                        f"got {_show(value)}")
    ops = []
    raw_ops = body.get("ops") or {}
    if not isinstance(raw_ops, dict):
        raise ctx.fail(f"{path}.ops", f"expected a mapping of name to op, got {_show(raw_ops)}")
    for op_name, op in raw_ops.items():
        op_path = f"{path}.ops.{op_name}"
        op = ctx.mapping(op, op_path, ("op", "rate", "buckets", "hash", "function"))
        if "function" in op:
            ops.append(SeedOpConfig(str(op_name), "function",
                                    function=ctx.ref(op["function"], f"{op_path}.function")))
            continue
        kind = ctx.choice(op.get("op"), f"{op_path}.op", SEED_OPS, "seed op")
        hash_name = ctx.choice(op.get("hash", "xxh3"), f"{op_path}.hash", SEED_HASHES, "hash")
        if kind == "sample":
            if "rate" not in op:
                raise ctx.fail(f"{op_path}.rate", "missing; a sample needs a rate in [0, 1]")
            ops.append(SeedOpConfig(str(op_name), "sample", hash=hash_name,
                                    rate=ctx.number(op["rate"], f"{op_path}.rate", 0.0, 1.0,
                                                    what="the share of records sampled")))
        else:
            buckets = op.get("buckets")
            if not isinstance(buckets, dict) or not buckets:
                raise ctx.fail(f"{op_path}.buckets", f"expected a mapping of bucket name to weight, "
                                                     f"got {_show(buckets)}")
            pairs = tuple((str(b), ctx.integer(w, f"{op_path}.buckets.{b}", minimum=1))
                          for b, w in buckets.items())
            ops.append(SeedOpConfig(str(op_name), "split", buckets=pairs, hash=hash_name))
    return SeedConfig(value, tuple(ops))


def _transform(ctx: _Ctx, body: Any, path: str) -> TransformSpec | None:
    if body is None:
        return None
    body = ctx.mapping(body, path, ("tft", "saved", "python", "custom_config"))
    kinds = [key for key in body if key != "custom_config"]
    if len(kinds) != 1:
        raise ctx.fail(path, f"expected exactly one of tft, saved, python; got {_show(sorted(kinds))}")
    kind, value = kinds[0], body[kinds[0]]
    custom = body.get("custom_config")
    if custom is not None and (kind != "tft" or not isinstance(custom, dict)):
        raise ctx.fail(f"{path}.custom_config", "goes with tft: a mapping handed to a preprocessing_fn that takes "
                                                "a custom_config argument, as TFX Transform's custom_config is")
    if kind == "tft":
        import json

        try:
            custom_text = json.dumps(custom, sort_keys=True) if custom is not None else None
        except (TypeError, ValueError) as exc:
            raise ctx.fail(f"{path}.custom_config", f"expected JSON-like values: {exc}") from exc
        return TransformSpec("tft", ref=ctx.ref(value, f"{path}.tft"), custom_config=custom_text)
    if kind == "python":
        return TransformSpec("python", ref=ctx.ref(value, f"{path}.python"))
    if isinstance(value, dict):
        ctx.mapping(value, f"{path}.saved", ("from_side", "path"))
        if "from_side" in value:
            return TransformSpec("saved", from_side=ctx.string(value["from_side"],
                                                               f"{path}.saved.from_side"))
        value = value.get("path")
    saved = ctx.string(value, f"{path}.saved")
    full = os.path.join(ctx.base_dir, saved)
    if not os.path.isdir(full):
        raise ctx.fail(f"{path}.saved", f"{_show(saved)} is not a directory (resolved to {full}); "
                                        f"expected an exported TFT output dir with transform_fn/")
    from parity.stages.transform import find_graph_dir

    try:
        return TransformSpec("saved", path=find_graph_dir(full))
    except ConfigError as exc:
        raise ctx.fail(f"{path}.saved", str(exc)) from exc


def _tolerance(ctx: _Ctx, body: Any) -> ToleranceSpec:
    if body is None:
        return ToleranceSpec()
    body = ctx.mapping(body, "tolerance", ("default", "features", "max_diverged", "max_unpaired"))

    def one(value: Any, path: str) -> Tolerance:
        value = ctx.mapping(value, path, ("abs", "rel"))
        what = "a tolerance is a distance: 0 compares exactly"
        return Tolerance(ctx.number(value.get("abs", 0.0), f"{path}.abs", 0.0, what=what),
                         ctx.number(value.get("rel", 0.0), f"{path}.rel", 0.0, what=what))

    default = one(body["default"], "tolerance.default") if body.get("default") is not None else Tolerance()
    features = body.get("features") or {}
    if not isinstance(features, dict):
        raise ctx.fail("tolerance.features", f"expected a mapping of feature to {{abs, rel}}, "
                                             f"got {_show(features)}")
    return ToleranceSpec(
        default=default,
        features=tuple(sorted((str(k), one(v, f"tolerance.features.{k}")) for k, v in features.items())),
        max_diverged=ctx.integer(body.get("max_diverged", 0), "tolerance.max_diverged", minimum=0),
        max_unpaired=ctx.integer(body.get("max_unpaired", 0), "tolerance.max_unpaired", minimum=0))


def _report(ctx: _Ctx, body: Any) -> ReportSpec:
    if body is None:
        return ReportSpec()
    body = ctx.mapping(body, "report", ("examples", "redact", "noise"))
    return ReportSpec(examples=ctx.integer(body.get("examples", 10), "report.examples", minimum=0),
                      redact=ctx.boolean(body.get("redact", False), "report.redact"),
                      noise=ctx.boolean(body.get("noise", False), "report.noise"))


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


def aggregate_type(agg: AggregateSpec, schema: Mapping[str, FieldType] | None) -> FieldType:
    """The type of an aggregate's value: counts are int64, means float64, others follow the field."""
    if agg.op in ("count", "distinct_count"):
        return parse_type("int64")
    if agg.op == "mean":
        return parse_type("float64")
    source = (schema or {}).get(agg.field or "")
    if source is not None and source.name in ("int64", "int32", "bool"):
        return parse_type("int64")
    return parse_type("float64")
