"""asv suites for dsbench: what reading each shipped export definition costs, commit by commit.

Run from the repository root (asv.conf.json names this directory); see docs/asv.md.
"""
