"""Fingerprint sets and tap sets: what a replay or a tap leaves behind, and how it is read back."""
