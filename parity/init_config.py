"""`parity init`: a commented starting parity.yaml from a capture.

The capture's schema is inferred from the file (`parity.capture.infer_schema`), or taken from a TFMD schema given with
`--schema`; the sides' transforms come from `--offline` and `--production`. Every stage key is shown with its
default and a comment, commented out where the default is to leave it out, so the written config runs as it
is (both sides replay the same capture the same way) and each difference between the pipelines is one
uncommented block away. The text is checked by the config loader before it is written, and an existing file
is never overwritten.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass

import yaml

from parity.capture.infer_schema import CaptureSample, InferredField, infer
from parity.errors import ConfigError, InputError
from parity.storage.context import Storage

__all__ = ["InitOptions", "init_config", "render_config"]

_COMMENT_COLUMN = 44
_PLAIN = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./-]*$")  # no colons, spaces, quotes, flow characters
_KINDS = ("tft", "python", "saved")
_FILE_REF = re.compile(r"^(?P<file>[^:]+\.py):(?P<attr>[A-Za-z_][\w.]*)$")
_MODULE_REF = re.compile(r"^(?P<module>[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_][\w.]*)$")
_KEY_NAMES = re.compile(r"(^|_)(id|key|uuid)$", re.IGNORECASE)
_TIME_NAMES = re.compile(r"(event_?time|timestamp|(^|_)(ts|time)$|_at$)", re.IGNORECASE)
# the magnitude of "now" in each unit: 1.7e9 s, 1.7e12 ms, 1.7e15 us, 1.7e18 ns
_UNITS = ((1e11, "s"), (1e14, "ms"), (1e17, "us"), (float("inf"), "ns"))


@dataclass(frozen=True)
class InitOptions:
    """What `parity init` was given (paths as typed, relative to the working folder)."""

    capture: str
    out: str = "parity.yaml"
    schema: str | None = None
    offline: str | None = None
    production: str | None = None
    key: tuple[str, ...] = ()
    format: str | None = None


@dataclass(frozen=True)
class _Transform:
    kind: str
    value: str  # as the config names it (relative to the config's folder)


def init_config(options: InitOptions, storage: Storage = Storage()) -> str:
    """Writes the starting config to `options.out` and returns its path.

    Raises:
        InputError: `options.out` exists (it is never overwritten), the capture cannot be read, or a `--key`
            field is not in it.
        ConfigError: the config that would be written does not load (e.g. `--production` names a folder that
            is no TFT output); nothing is written then.
    """
    out = options.out
    if os.path.lexists(out):
        raise InputError(f"{out} already exists; parity init never overwrites a file: move it away or give "
                         f"another --out")
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise InputError(f"{out}: the folder {folder} does not exist; create it first")
    text = render_config(options, folder, storage)
    _check_loads(text, folder, out)
    try:
        with open(out, "x", encoding="utf-8") as handle:  # "x": a file that appeared meanwhile is kept too
            handle.write(text)
    except FileExistsError as exc:
        raise InputError(f"{out} already exists; parity init never overwrites a file") from exc
    except OSError as exc:
        raise InputError(f"{out}: cannot write the config: {exc.strerror or exc}") from exc
    return out


def _check_loads(text: str, folder: str, out: str) -> None:
    from parity.config import load_config

    handle, path = tempfile.mkstemp(prefix=".parity-init-", suffix=".yaml", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        load_config(path, check_refs=False)  # user modules are imported by `parity check`, not here
    except ConfigError as exc:
        problem = str(exc).split(": ", 1)[1] if str(exc).startswith(path) else str(exc)
        raise ConfigError(f"{out}: the config parity init would write does not load: {problem}; nothing was "
                          f"written") from exc
    finally:
        os.unlink(path)


def render_config(options: InitOptions, folder: str, storage: Storage = Storage()) -> str:
    """The commented config text for `options`, with paths relative to `folder` (the config file's folder)."""
    capture_path = _relative(options.capture, folder)
    tfmd_fields: tuple[tuple[str, str], ...] = ()
    if options.schema is not None:
        from parity.capture import tfmd

        try:
            loaded = tfmd.load(options.schema)
        except tfmd.TFMDError as exc:
            raise InputError(f"--schema {options.schema}: {exc}") from exc
        tfmd_fields = tuple((name, str(field_type)) for name, field_type in loaded.fields)
    sample = infer(options.capture, os.getcwd(), options.format, storage=storage)
    names = [name for name, _ in tfmd_fields] if tfmd_fields else [f.name for f in sample.fields]
    for field in options.key:
        if field not in names:
            raise InputError(f"--key {field}: no such field in {options.capture}; its fields are "
                             f"{', '.join(names) or '(none)'}")
    if options.schema is None and not any(f.type for f in sample.fields):
        raise InputError(f"{options.capture}: no field type could be inferred from it; give --schema "
                         f"(a TFMD schema.pbtxt)")
    offline = _transform(options.offline, "--offline", folder)
    production = _transform(options.production, "--production", folder)
    lines = _header(options, capture_path, sample)
    lines += _capture(options, folder, capture_path, sample, tfmd_fields)
    lines += ["", _line("sides:", 'exactly two; the first is "left", the second "right" in reports')]
    for name, transform in (("offline", offline), ("production", production)):
        lines += _side(name, transform, offline, sample, folder)
    lines += _tolerance_and_report()
    return "\n".join(lines) + "\n"


def _line(text: str, comment: str = "") -> str:
    if not comment:
        return text
    return f"{text.ljust(_COMMENT_COLUMN - 2)}  # {comment}" if text else f"# {comment}"


def _scalar(text: str) -> str:
    """A YAML scalar for `text`: plain when that reads back as the same string, else double-quoted (JSON)."""
    if _PLAIN.match(text):
        try:
            if yaml.safe_load(text) == text:
                return text
        except yaml.YAMLError:
            pass
    return json.dumps(text, ensure_ascii=False)


def _relative(path: str, folder: str) -> str:
    """`path` as the config names it: relative to the config's folder, unless they share no folder but the
    root (then absolute); a URL, which Beam's FileSystems read, as it is."""
    if "://" in path:
        return path
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.commonpath([full, os.path.abspath(folder)]) == os.path.abspath(os.sep):
        return full
    return os.path.relpath(full, folder)


def _transform(value: str | None, flag: str, folder: str) -> _Transform | None:
    """`--offline`/`--production`: an exported TFT output folder (`saved`), or `module:fn` / `file.py:fn`: a TFT
    `preprocessing_fn` when the function is named so, else a per-record Python function; `tft:`, `python:`
    or `saved:` in front says which."""
    if value is None:
        return None
    kind = None
    head, _, rest = value.partition(":")
    if head in _KINDS and rest:
        kind, value = head, rest
    if kind == "saved" or (kind is None and os.path.isdir(value)):
        if not os.path.isdir(value):
            raise InputError(f"{flag} saved:{value}: not a folder; give an exported TFT output folder (the one "
                             f"holding transform_fn/)")
        return _Transform("saved", _relative(value, folder))
    file_ref, module_ref = _FILE_REF.match(value), _MODULE_REF.match(value)
    if not (file_ref or module_ref):
        raise InputError(f"{flag} {value}: expected an exported TFT output folder, or a function as module:fn or "
                         f"path/to/module.py:fn (prefix tft: or python: to say which kind)")
    attr = (file_ref or module_ref).group("attr")  # type: ignore[union-attr]
    if kind is None:
        kind = "tft" if attr.rsplit(".", 1)[-1] == "preprocessing_fn" else "python"
    if file_ref:
        return _Transform(kind, f"{_relative(file_ref.group('file'), folder)}:{attr}")
    module = module_ref.group("module")  # type: ignore[union-attr]
    as_file = module.replace(".", os.sep) + ".py"
    if os.path.abspath(folder) != os.path.abspath(os.getcwd()) and os.path.isfile(as_file):
        # imported with the config's folder first on sys.path: name the file this folder holds
        return _Transform(kind, f"{_relative(as_file, folder)}:{attr}")
    return _Transform(kind, value)


def _header(options: InitOptions, capture_path: str, sample: CaptureSample) -> list[str]:
    return [
        f"# A starting parity config, written by `parity init` from {capture_path}.",
        "# Both sides replay the same capture with every stage at its default, so `parity check` runs as it is;",
        "# then say how offline and production differ: every stage key is below, commented out, with its",
        "# default. Paths are relative to this file; durations are seconds or strings like 90s, 15m, 1h, 1d.",
        "# Reference: README.md, \"Configuration reference\".",
        "version: 1",
        _line(f"name: {_scalar(_run_name(capture_path, options))}", "shown in reports; default: this file's name"),
    ]


def _run_name(capture_path: str, options: InitOptions) -> str:
    """The run's name: a TFX pipeline's, for a capture inside its root (`<root>/<...ExampleGen>/examples/<id>/
    Split-train`: the root's folder name, not the split's); else the offline module's; else the capture's."""
    parts = [p for p in os.path.normpath(os.path.abspath(capture_path)).split(os.sep) if p]
    for i in range(2, len(parts) - 1):
        if parts[i] == "examples" and parts[i - 1].endswith("ExampleGen") and parts[i + 1].isdigit():
            return _stem(parts[i - 2])
    offline = options.offline or ""
    head, _, rest = offline.partition(":")
    offline = rest if head in _KINDS else offline
    if re.search(r"\.py:\w", offline):  # a module file: its name
        return _stem(offline.rsplit(":", 1)[0])
    return _stem(capture_path)


def _stem(path: str) -> str:
    base = os.path.basename(path.rstrip("/")) or "capture"
    for _ in range(2):  # trips.tfrecord.gz -> trips
        base = os.path.splitext(base)[0] if "." in base and not base.startswith(".") else base
    return re.sub(r"[^\w.-]+", "-", base).strip("-") or "capture"


def _capture(options: InitOptions, folder: str, capture_path: str, sample: CaptureSample,
             tfmd_fields: tuple[tuple[str, str], ...]) -> list[str]:
    lines = ["", _line("capture:", "the captured raw records, shared by both sides"),
             _line(f"  path: {_scalar(capture_path)}", "a file, a folder of files, or a glob"),
             _line(f"  format: {sample.format}",
                   "jsonl | tfrecord (tf.Example) | parquet | csv; default: from the extension")]
    if options.key:
        lines.append(_line(f"  key: [{', '.join(_scalar(k) for k in options.key)}]",
                           "the fields forming the record key; omitted: the input fingerprint is the key"))
    else:
        guess = next((f.name for f in sample.fields if f.type and _KEY_NAMES.search(f.name)), None)
        lines.append(_line(f"  # key: [{_scalar(guess) if guess else 'FIELD'}]",
                           "the fields forming the record key; omitted (now): the input fingerprint is the key"))
    if tfmd_fields:
        lines.append(_line(f"  schema: {_scalar(_relative(options.schema or '', folder))}",
                           "a TFMD schema: types and shapes as TFX reads them"))
        for name, type_text in tfmd_fields:
            lines.append(_line(f"  #   {_scalar(name)}: {type_text}", "(from the TFMD schema)"))
    else:
        where = (f"the Parquet schema of {_relative(sample.files[0], folder)}" if sample.format == "parquet"
                 else f"the first {sample.sampled} records of {_relative(sample.files[0], folder)}")
        lines.append(_line("  schema:", f"inferred from {where}: check it"))
        for field in sample.fields:
            lines.append(_schema_line(field))
    lines += [
        _line("  # tz: UTC", "the time zone of naive iso8601 times; default UTC"),
        _line("  # max_quarantined: 0.01", "a side stops (exit 2) past this share of unreadable records"),
        _line("  # max_record_bytes: 16777216", "a record larger than this (canonical bytes) is quarantined"),
    ]
    return lines


def _schema_line(field: InferredField) -> str:
    if field.type is None:
        return _line(f"    # {_scalar(field.name)}:", f"left out ({field.note}); read as it is")
    return _line(f"    {_scalar(field.name)}: {field.type}", field.note)


def _time_guess(sample: CaptureSample) -> tuple[str, str, str] | None:
    """(field, unit, why) of the field that looks like the event time, or None."""
    for field in sample.fields:
        if field.type is None or not _TIME_NAMES.search(field.name):
            continue
        base = field.type.removeprefix("optional<").rstrip(">")
        if base == "string":
            return field.name, "iso8601", f"{field.name} holds text: ISO-8601 times?"
        if base in ("int64", "int32", "float64", "float32") and field.numbers:
            magnitude = max(abs(n) for n in field.numbers)
            unit = next(u for limit, u in _UNITS if magnitude < limit)
            return field.name, unit, f"{field.name}'s values look like {unit} since the epoch"
    return None


def _side(name: str, transform: _Transform | None, offline: _Transform | None,
          sample: CaptureSample, folder: str) -> list[str]:
    text = next((f.name for f in sample.fields if f.type in ("string", "optional<string>")), "FIELD")
    number = next((f.name for f in sample.fields if f.type and "float" in f.type and "list" not in f.type), "FIELD")
    time = _time_guess(sample)
    arrival = next((f.name for f in sample.fields if f.type and re.search(r"ingest|arriv", f.name, re.I)), "FIELD")
    lines = [f"  {name}:",
             _line("    # capture: {path: other.jsonl}", "this side's own values of any capture field"),
             "    # -- stage window: the event time and the windows it falls in. Default (both omitted): no",
             "    #    event time, every record in the global window.",
             "    # timestamp:",
             _line(f"    #   field: {_scalar(time[0]) if time else 'FIELD'}",
                   f"guessed: {time[2]}" if time else "the field holding the event time"),
             _line(f"    #   unit: {time[1] if time else 's'}", "s | ms | us | ns | iso8601; default s"),
             _line("    #   tz: UTC", "for naive iso8601 strings; default UTC"),
             _line("    #   # function: module:fn", "instead of field: fn(record) -> event time in seconds"),
             "    # window:",
             _line("    #   type: fixed", "e.g.; fixed | sliding | session | global; or windowfn: module:factory"),
             _line("    #   size: 1h", "e.g.; fixed and sliding; sliding also takes period, session gap"),
             _line("    #   offset: 0s", "fixed and sliding; default 0s"),
             _line("    #   lateness:", "default: omitted, no record is late"),
             _line(f"    #     arrival: {_scalar(arrival)}", "each record's arrival time, in the timestamp's unit"),
             _line("    #     out_of_orderness: 0s", "watermark = max event time seen - this; default 0s"),
             _line("    #     allowed: 0s", "dropped when its window ended this long before the watermark"),
             "    # -- stage shard: the grouping key, shard and per-(window, key) aggregates. Default (omitted):",
             "    #    records pass through unchanged (and are still fingerprinted), as for every stage.",
             "    # shard:",
             _line(f"    #   key: [{_scalar(text)}]", "e.g.; grouping key fields, or {function: module:fn}"),
             _line("    #   count: 1", "number of shards; default 1"),
             _line("    #   hash: xxh3", "xxh3 | crc32 | md5 | python; default xxh3"),
             _line("    #   aggregates:", "e.g.; default none; op: count | sum | mean | min | max | distinct_count"),
             _line("    #     count_1h: {op: count}", ""),
             _line(f"    #     mean_1h: {{op: mean, field: {_scalar(number)}}}",
                   "combine: exact (default) | sequential"),
             "    # -- stage coder: an encode/decode round trip through the side's coder. Default: none.",
             "    # coder:",
             _line("    #   type: json", "e.g.; json | tfexample | avro | pickle | arrow; or coder: module:factory"),
             _line("    #   int_as_double: false", "json only: ints through a float64, as JavaScript does"),
             "    # -- stage seed: the outputs of the side's seeded operations. Default: none.",
             "    # seed:",
             _line("    #   value: 42", "e.g.; default null: unseeded"),
             "    #   ops:",
             _line("    #     in_sample: {op: sample, rate: 0.1}", "e.g.; hash: xxh3 (default) | md5 | crc32 | python"),
             _line("    #     split: {op: split, buckets: {train: 8, eval: 2}}", ""),
             _line("    #     score: {function: module:fn}", "fn(record, rng) -> value"),
             "    # -- stage transform: the side's output features. Default: none (the record is the output).",
             ]
    if transform is not None:
        custom = _custom_config(transform, folder)
        if custom:  # a block, so that uncommenting custom_config's lines is all the edit there is
            lines += ["    transform:", _line(f"      {transform.kind}: {_scalar(transform.value)}", _TRANSFORM_NOTES),
                      *custom]
        else:
            lines.append(_line(f"    transform: {{{transform.kind}: {_scalar(transform.value)}}}", _TRANSFORM_NOTES))
    elif name != "offline" and offline is not None and offline.kind == "tft":
        lines.append(_line("    # transform: {saved: {from_side: offline}}",
                           "serve the graph the offline side exported"))
    else:
        lines.append(_line("    # transform: {tft: module:preprocessing_fn}", _TRANSFORM_NOTES))
    return lines


def _custom_config(transform: _Transform, folder: str) -> list[str]:
    """For a `tft:` module file, the keys its code reads of `custom_config` as a commented `custom_config:` block
    with placeholders: TFX hands preprocessing_fn Transform's `custom_config`, which the capture cannot tell."""
    if transform.kind != "tft" or ":" not in transform.value:
        return []
    module_path = transform.value.rsplit(":", 1)[0]
    path = module_path if os.path.isabs(module_path) else os.path.join(folder, module_path)
    required, optional = custom_config_keys(path)
    if not required and not optional:
        return []
    lines = [_line("      # custom_config:", "keys preprocessing_fn reads of TFX's custom_config: uncomment, fill in")]
    lines += [_line(f"      #   {_scalar(key)}: FILL_IN", "read as custom_config[...]: your pipeline's value")
              for key in required]
    lines += [_line(f"      #   {_scalar(key)}: FILL_IN", "read with .get(): optional") for key in optional]
    return lines


def custom_config_keys(module_file: str) -> tuple[list[str], list[str]]:
    """(keys read as `custom_config[KEY]`, keys read as `custom_config.get(KEY)`) in a module file's source,
    sorted; empty when the file cannot be read or parsed (the check then says which key is missing)."""
    import ast

    try:
        with open(module_file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return [], []
    required, optional = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_custom_config(node.value) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            required.add(node.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and _is_custom_config(node.func.value) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            optional.add(node.args[0].value)
    return sorted(required), sorted(optional - required)


def _is_custom_config(node: object) -> bool:
    import ast

    return isinstance(node, ast.Name) and node.id == "custom_config"


_TRANSFORM_NOTES = "tft: module:preprocessing_fn | saved: TFT_OUTPUT_DIR | python: module:fn"


def _model_block() -> list[str]:
    """The `model` stage, commented out: each side's transform outputs fed to a trained model, so the report also
    says how many predictions and decisions the skew changes (parity v1.2)."""
    return [
        "",
        _line("# model:", "optional last stage: feed the features to a trained model (parity v1.2)"),
        _line("#   saved: serving_model/", "a TF2 SavedModel (Keras model.export, tf.saved_model.save,"),
        _line("#", "a TFX Trainer's serving export) or a .keras file; URLs too"),
        _line("#   signature: serving_default", "default: serving_default, else the only signature"),
        _line("#   inputs: {}", "model input -> transform feature; default: the same name"),
        _line("#   outputs: []", "the outputs compared; default: all of the signature's"),
        _line("#   decision: {output: logits, rule: argmax}", "or {output: p, rule: threshold, at: 0.5}"),
        _line("#", "a side may override it: sides.NAME.model"),
    ]


def _tolerance_and_report() -> list[str]:
    return _model_block() + [
        "",
        "tolerance:",
        _line("  default: {abs: 0.0, rel: 0.0}", "numbers are within tolerance when |a-b| <= abs + rel*|b|"),
        _line("  features: {}", "per feature, e.g. {fare_z: {abs: 1.0e-6}}"),
        _line("  max_diverged: 0", 'the verdict is "parity" while diverged records <= this'),
        _line("  # max_unpaired: 0", "... and while left_only + right_only <= this (parity v1.1)"),
        "",
        "report:",
        _line("  examples: 10", "divergent examples kept per (stage, cause)"),
        _line("  redact: false", "true: reports hold field names and hashes only, never raw values"),
        _line("  noise: false", "true: replay each side twice to find nondeterministic stages"),
    ]

