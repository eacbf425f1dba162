"""Canonical bytes and fingerprints: the one definition of what parity hashes."""
