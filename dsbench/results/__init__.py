"""The documents dsbench writes and reads, as one contract: the bench result (document.py),
its JSON Schema and typed form, and the machine it was measured on (machine.py).

In: plain measurements. Out: validated, versioned documents. May import: the foundation modules
and dsbench.adapters (the export summary a result carries).
"""
