"""Paths parity writes: the out folder's claim and lock, and atomic writes."""
