"""Two results side by side: ratios with intervals and where the cost moved (compare.py), and the
CI gate's pass/fail (gate.py).

In: two bench result documents, or export paths to measure in one interleaved run. Out: the
comparison and gate documents. May import: the foundation modules, adapters, export, results,
loader, model.
"""
