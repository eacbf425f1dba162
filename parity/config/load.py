"""YAML config -> frozen dataclasses (parity.config.model), validated in one place.

Every error names the file, the field path, the bad value and what would be accepted, and exits 2.
"""
from __future__ import annotations

import os
import re
import zoneinfo
from typing import TYPE_CHECKING, Any

from parity.capture.schema import parse_schema, parse_type
from parity.config.document import read_document
from parity.config.model import (FORMATS, MAX_SCHEMA_FIELDS, CaptureSpec, Config, ReportSpec, SideConfig, Tolerance,
                                 ToleranceSpec)
from parity.config.validate import Ctx, _show
from parity.errors import ConfigError
from parity.stages.model import DECISION_RULES, DecisionSpec, ModelSpec
from parity.storage import urls
from parity.stages.seed import SEED_HASHES, SEED_OPS, FunctionOp, SampleOp, SeedOp, SeedSpec, SplitOp
from parity.stages.shard import AGGREGATE_COMBINES, AGGREGATE_OPS, SHARD_HASHES, AggregateSpec, ShardSpec
from parity.stages.timestamp import TIME_UNITS, TimestampSpec
from parity.stages.transform import TransformSpec, find_graph_dir
from parity.stages.window import MAX_WINDOWS_PER_RECORD, WINDOW_TYPES, LatenessSpec, WindowSpec

if TYPE_CHECKING:
    from parity.stages.coder import CoderSpec

# Side names become folder names under --out (sides/<name>, noise/<name>): nothing that could leave it.
_SIDE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def load_config(path: str | os.PathLike, check_refs: bool = True) -> Config:
    """Loads and validates a parity config file (YAML, `version: 1`).

    `check_refs=False` leaves its `module:attr` references unimported (the same Config, with every other
    check made): importing a TFT module takes seconds, which `parity check` spends after starting its child.
    """
    path = os.fspath(path)
    document = read_document(path)
    base_dir = os.path.dirname(os.path.abspath(path))
    ctx = Ctx(path, base_dir, check_refs)
    if document is None:
        raise ConfigError(f"{path}: the config is empty (or only comments); a parity config is a YAML mapping "
                          f"with version: 1, capture and two sides (see the README's config reference)")
    doc = ctx.mapping(document, "", ("version", "name", "capture", "sides", "tolerance", "report", "model"))
    if type(doc.get("version")) is not int or doc["version"] != 1:  # `version: true` is no 1: never a bool
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
    top_model = _model(ctx, doc.get("model"), "model")
    sides = tuple(_side(ctx, str(n), body, top_capture, top_model) for n, body in sides_doc.items())
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
_SIDE_KEYS = ("capture", "timestamp", "window", "shard", "coder", "seed", "transform", "model")


def _capture(ctx: Ctx, top: dict | None, override: Any, path: str) -> CaptureSpec:
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
    tfmd_text = tfmd_path = None
    if isinstance(merged.get("schema"), str):  # a TFMD schema.pbtxt, or SchemaGen's output folder
        from parity.capture import tfmd

        location = os.path.join(ctx.base_dir, os.path.expanduser(merged["schema"]))
        try:
            loaded = tfmd.load(location)
        except tfmd.TFMDError as exc:
            raise ctx.fail(f"{where}.schema", f"{exc}") from exc
        schema, tfmd_text, tfmd_path = loaded.fields, loaded.text, loaded.path
        if len(schema) > MAX_SCHEMA_FIELDS:
            raise ctx.fail(f"{where}.schema", f"the TFMD schema {merged['schema']!r:.200} has {len(schema):,} "
                                              f"features, above the limit of {MAX_SCHEMA_FIELDS:,}; keep the features the "
                                              f"pipelines read")
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
                       max_quarantined=max_quarantined, max_record_bytes=max_record_bytes, tfmd_text=tfmd_text,
                       tfmd_path=tfmd_path)


def _time_zone(ctx: Ctx, value: Any, path: str) -> str:
    """An IANA time zone name that this machine's zone database knows (e.g. UTC, America/Chicago)."""
    tz = ctx.string(value, path)
    try:
        zoneinfo.ZoneInfo(tz)
    except Exception as exc:  # ZoneInfoNotFoundError, or ValueError for a name that is not a zone key
        raise ctx.fail(path, f"unknown time zone {_show(tz)}; expected an IANA name such as UTC, "
                             f"Europe/Berlin or America/Chicago") from exc
    return tz


def _side(ctx: Ctx, name: str, body: Any, top_capture: dict | None, top_model: ModelSpec | None = None) -> SideConfig:
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
        model=_model(ctx, body["model"], f"{path}.model") if body.get("model") is not None else top_model,
    )


def _timestamp(ctx: Ctx, body: Any, path: str, capture_tz: str = "UTC") -> TimestampSpec | None:
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


def _window(ctx: Ctx, body: Any, path: str) -> WindowSpec | None:
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


def _shard(ctx: Ctx, body: Any, path: str) -> ShardSpec | None:
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


def _coder(ctx: Ctx, body: Any, path: str) -> CoderSpec | None:
    """The coder stage's spec, its factory a `Ref` until the replay imports it."""
    if body is None:
        return None
    from parity.stages.coder import CODER_TYPES, CoderSpec  # imports Beam: only for a config with a coder

    body = ctx.mapping(body, path, ("type", "coder", "int_as_double"))
    if "coder" in body:
        if "type" in body:
            raise ctx.fail(path, "give either 'type' or 'coder' (a module:factory), not both")
        return CoderSpec(factory=ctx.ref(body["coder"], f"{path}.coder"))
    kind = ctx.choice(body.get("type"), f"{path}.type", CODER_TYPES, "coder")
    options = {}
    if "int_as_double" in body:
        if kind != "json":
            raise ctx.fail(f"{path}.int_as_double", "only the json coder takes int_as_double")
        options["int_as_double"] = ctx.boolean(body["int_as_double"], f"{path}.int_as_double")
    return CoderSpec(kind, options=options)


def _seed(ctx: Ctx, body: Any, path: str) -> SeedSpec | None:
    """The seed stage's spec, a function op's `fn` a `Ref` until the replay imports it."""
    if body is None:
        return None
    body = ctx.mapping(body, path, ("value", "ops"))
    value = body.get("value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, str))):
        raise ctx.fail(f"{path}.value", f"expected an integer or string seed (or null for unseeded), "
                                        f"got {_show(value)}")
    ops: list[tuple[str, SeedOp]] = []
    raw_ops = body.get("ops") or {}
    if not isinstance(raw_ops, dict):
        raise ctx.fail(f"{path}.ops", f"expected a mapping of name to op, got {_show(raw_ops)}")
    for op_name, op in raw_ops.items():
        op_path = f"{path}.ops.{op_name}"
        op = ctx.mapping(op, op_path, ("op", "rate", "buckets", "hash", "function"))
        if "function" in op:
            ops.append((str(op_name), FunctionOp(ctx.ref(op["function"], f"{op_path}.function"))))
            continue
        kind = ctx.choice(op.get("op"), f"{op_path}.op", SEED_OPS, "seed op")
        hash_name = ctx.choice(op.get("hash", "xxh3"), f"{op_path}.hash", SEED_HASHES, "hash")
        if kind == "sample":
            if "rate" not in op:
                raise ctx.fail(f"{op_path}.rate", "missing; a sample needs a rate in [0, 1]")
            ops.append((str(op_name), SampleOp(ctx.number(op["rate"], f"{op_path}.rate", 0.0, 1.0,
                                                          what="the share of records sampled"), hash_name)))
        else:
            buckets = op.get("buckets")
            if not isinstance(buckets, dict) or not buckets:
                raise ctx.fail(f"{op_path}.buckets", f"expected a mapping of bucket name to weight, "
                                                     f"got {_show(buckets)}")
            pairs = tuple((str(b), ctx.integer(w, f"{op_path}.buckets.{b}", minimum=1))
                          for b, w in buckets.items())
            try:
                ops.append((str(op_name), SplitOp(pairs, hash_name)))
            except ValueError as exc:  # names that are distinct keys but the same text (1 and '1')
                raise ctx.fail(f"{op_path}.buckets", str(exc)) from exc
    return SeedSpec(value, tuple(ops))


def _transform(ctx: Ctx, body: Any, path: str) -> TransformSpec | None:
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
    if "://" in saved and not saved.startswith("file://"):
        # a URL (s3://...): read when the transform is set up, with the run's storage options (which the config
        # does not know), copied to a local folder for TensorFlow (parity.stages.transform.local_graph)
        return TransformSpec("saved", path=saved.rstrip("/"))
    full = os.path.join(ctx.base_dir, saved)
    if not os.path.isdir(full):
        raise ctx.fail(f"{path}.saved", f"{_show(saved)} is not a directory (resolved to {full}); "
                                        f"expected an exported TFT output dir with transform_fn/")
    try:
        return TransformSpec("saved", path=find_graph_dir(full))
    except ConfigError as exc:
        raise ctx.fail(f"{path}.saved", str(exc)) from exc


def _model(ctx: Ctx, body: Any, path: str) -> ModelSpec | None:
    """The `model` stage's spec (contract section 8); the model itself is loaded where the stage runs."""
    if body is None:
        return None
    body = ctx.mapping(body, path, ("saved", "signature", "inputs", "outputs", "decision"))
    saved = ctx.string(body.get("saved"), f"{path}.saved")
    if not urls.is_url(saved) or saved.startswith("file://"):
        full = os.path.join(ctx.base_dir, saved[len("file://"):] if saved.startswith("file://") else saved)
        if not (os.path.isdir(full) and os.path.isfile(os.path.join(full, "saved_model.pb"))) and \
                not (os.path.isfile(full) and full.endswith(".keras")):
            raise ctx.fail(f"{path}.saved", f"{_show(saved)} is neither a SavedModel folder (with saved_model.pb) nor "
                                            f"a .keras file (resolved to {full}); expected a TF2 SavedModel (Keras "
                                            f"model.export, tf.saved_model.save, a TFX Trainer's serving export) or "
                                            f"a .keras file")
        saved = full
    signature = body.get("signature")
    if signature is not None:
        signature = ctx.string(signature, f"{path}.signature")
    inputs = body.get("inputs") or {}
    if not isinstance(inputs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in inputs.items()):
        raise ctx.fail(f"{path}.inputs", f"expected a mapping of model input name to transform feature name, got "
                                         f"{_show(inputs)}")
    outputs = body.get("outputs") or []
    if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
        raise ctx.fail(f"{path}.outputs", f"expected a list of output names, got {_show(outputs)}")
    decision = None
    if body.get("decision") is not None:
        d = ctx.mapping(body["decision"], f"{path}.decision", ("output", "rule", "at"))
        rule = d.get("rule", "argmax")
        if rule not in DECISION_RULES:
            raise ctx.fail(f"{path}.decision.rule", f"unknown rule {_show(rule)}; expected one of "
                                                    f"{', '.join(DECISION_RULES)}")
        decision = DecisionSpec(output=ctx.string(d.get("output"), f"{path}.decision.output"), rule=rule,
                                at=ctx.number(d.get("at", 0.5), f"{path}.decision.at"))
    return ModelSpec(saved=saved, signature=signature, inputs=tuple(sorted(inputs.items())),
                     outputs=tuple(outputs), decision=decision, where=f"{ctx.file}: {path}")


def _tolerance(ctx: Ctx, body: Any) -> ToleranceSpec:
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


def _report(ctx: Ctx, body: Any) -> ReportSpec:
    if body is None:
        return ReportSpec()
    body = ctx.mapping(body, "report", ("examples", "redact", "noise"))
    return ReportSpec(examples=ctx.integer(body.get("examples", 10), "report.examples", minimum=0),
                      redact=ctx.boolean(body.get("redact", False), "report.redact"),
                      noise=ctx.boolean(body.get("noise", False), "report.noise"))
