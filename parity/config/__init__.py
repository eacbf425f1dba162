"""A parity config: YAML loaded once (`load_config`) into frozen dataclasses (`Config`, `SideConfig`, ...).

`model` holds the types, `document` reads the YAML file, `validate` checks one value at a time and `load`
builds the config from the document. The stage names, coder types and seed hashes a config names are the
stages' own (`parity.stages.STAGES`, `parity.stages.coder.CODER_TYPES`, `parity.stages.seed.SEED_HASHES`).
"""
from parity.config.document import MAX_CONFIG_BYTES, MAX_CONFIG_NODES
from parity.config.load import load_config
from parity.config.model import (AGGREGATE_COMBINES, AGGREGATE_OPS, FORMATS, MAX_SCHEMA_FIELDS, MAX_WINDOWS_PER_RECORD,
                                 SEED_OPS, SHARD_HASHES, TIME_UNITS, WINDOW_TYPES, AggregateSpec, CaptureSpec, Config,
                                 LatenessSpec, Ref, ReportSpec, ShardSpec, SideConfig, TimestampSpec, Tolerance,
                                 ToleranceSpec, TransformSpec, WindowSpec, aggregate_type, capture_field_types)

__all__ = [
    "AGGREGATE_COMBINES", "AGGREGATE_OPS", "FORMATS", "MAX_CONFIG_BYTES", "MAX_CONFIG_NODES", "MAX_SCHEMA_FIELDS",
    "MAX_WINDOWS_PER_RECORD", "SEED_OPS", "SHARD_HASHES", "TIME_UNITS", "WINDOW_TYPES", "AggregateSpec",
    "CaptureSpec", "Config", "LatenessSpec", "Ref", "ReportSpec", "ShardSpec", "SideConfig", "TimestampSpec",
    "Tolerance", "ToleranceSpec", "TransformSpec", "WindowSpec", "aggregate_type", "capture_field_types",
    "load_config",
]
