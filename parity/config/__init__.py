"""A parity config: YAML loaded once (`load_config`) into frozen dataclasses (`Config`, `SideConfig`, ...).

`model` holds the types, `document` reads the YAML file, `validate` checks one value at a time and `load`
builds the config from the document. A side's stage specs, and the stage names, coder types, seed hashes, window
types and the other choices a config names, are the stages' own (`parity.stages` and its modules); the specs a
config holds are re-exported here, where users import them.
"""
from parity.config.document import MAX_CONFIG_BYTES, MAX_CONFIG_NODES
from parity.config.load import load_config
from parity.config.model import (FORMATS, MAX_SCHEMA_FIELDS, CaptureSpec, Config, Ref, ReportSpec, SideConfig,
                                 Tolerance, ToleranceSpec, capture_field_types)
from parity.stages.seed import SEED_OPS
from parity.stages.shard import (AGGREGATE_COMBINES, AGGREGATE_OPS, SHARD_HASHES, AggregateSpec, ShardSpec,
                                 aggregate_type)
from parity.stages.timestamp import TIME_UNITS, TimestampSpec
from parity.stages.transform import TransformSpec
from parity.stages.window import MAX_WINDOWS_PER_RECORD, WINDOW_TYPES, LatenessSpec, WindowSpec

__all__ = [
    "AGGREGATE_COMBINES", "AGGREGATE_OPS", "FORMATS", "MAX_CONFIG_BYTES", "MAX_CONFIG_NODES", "MAX_SCHEMA_FIELDS",
    "MAX_WINDOWS_PER_RECORD", "SEED_OPS", "SHARD_HASHES", "TIME_UNITS", "WINDOW_TYPES", "AggregateSpec",
    "CaptureSpec", "Config", "LatenessSpec", "Ref", "ReportSpec", "ShardSpec", "SideConfig", "TimestampSpec",
    "Tolerance", "ToleranceSpec", "TransformSpec", "WindowSpec", "aggregate_type", "capture_field_types",
    "load_config",
]
