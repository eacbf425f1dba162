"""What marks a folder as parity's own: the `--out` folder's marker file, and the files that make a folder a
fingerprint set. The out folder's claim (`parity.storage.outdir`) writes and reads the marker; the capture
listing (`parity.storage.capture_listing`) leaves out the files under either, so that a capture never reads
parity's own output."""
from __future__ import annotations

import os

MARKER = ".parity-out"
# a folder holding both files of either pair is a fingerprint set (one fingerprints file, or bucket files)
SET_FILES = (("manifest.json", "fingerprints.parquet"), ("manifest.json", "buckets.json"))


def has_marker(path: str) -> bool:
    """Whether the local folder `path` holds the marker as a regular file (a link planted under its name is no
    marker)."""
    marker = os.path.join(path, MARKER)
    return os.path.isfile(marker) and not os.path.islink(marker)
