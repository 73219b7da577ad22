"""The cluster model: a node's measured loader costs carried to a synchronous multi-GPU job.

In: a bench result document or stated costs (costs.py), a job (node.ClusterSpec) and storage
(profiles.py). Out: node rates (node.py), the simulated job (simulate.py, cluster.py) and the
words for its figures (explain.py); budget.py is the napkin arithmetic of `dsbench budget`.
Everything here is a model, not a measurement. May import: the foundation modules, results.
"""
