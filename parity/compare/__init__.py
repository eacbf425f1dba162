"""Comparing two fingerprint sets: pairing, first divergence, tolerance, causes, analyzers."""
