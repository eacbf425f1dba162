"""The stages a record goes through, one module each, and their names.

`STAGES` is the one list of stage names, in the order a record goes through them: the fingerprint set's
columns, the report's stage table and the taps all follow it.
"""

STAGES: tuple[str, ...] = ("input", "window", "shard", "coder", "seed", "transform")
