"""Which layout to roll out (`dsbench advise`): a sample of the user's export re-laid into
candidate layouts, shard sizes and encodings (fields.py, grid.py), measured against the export
as it is in interleaved passes within a budget (search.py), carried to the cluster and ranked
(advice.py), the winner's definition written (definition.py); run.py puts them together.

In: an export and the options of a bench run and a cluster. Out: the advice document
(results/schemas/advice.schema.json) and a definition file. May import: the foundation modules,
adapters, export, results, loader, model, analysis.
"""
