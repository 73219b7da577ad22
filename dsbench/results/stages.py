"""The loader's stages, in pipeline order: every result reports CPU seconds per sample in each.

A module of its own so that loader workers, which name the stages, do not import the document
machinery (its JSON Schema validation) in every spawned process.
"""

STAGES = ("read", "decode", "fields", "transform", "collate")
