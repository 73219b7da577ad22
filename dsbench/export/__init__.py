"""Exports dsbench writes: definitions (formats/*.toml), deterministic samples, the writers.

In: a definition file (spec.load_spec) and, for a re-export, an existing export read through the
adapters (reexport.reexport). Out: an export on disk (generate.generate), laid out as the
adapters read it. May import: the foundation modules, dsbench.storage (where a source is) and
dsbench.adapters, whose layout conventions (member names, column metadata, the manifest's name)
the writers follow.
"""
