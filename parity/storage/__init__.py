"""Paths parity writes: the out folder's claim and lock (outdir), and the one atomic write (files)."""
