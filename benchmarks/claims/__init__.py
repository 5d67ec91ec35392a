"""The claims study's own code, beside its records (``benchmarks/results/suites/claims-*``):
the paired comparisons on counts of correct examples (``paired``), every paper's claims and
their checks (``checks``), the claims table (``table``), the GSGM study's verdict (``verdict``),
a sweep's tuned table (``tuned_table``) and the generated blocks made from records folders
(``records_blocks``, written by ``benchmarks/blocks.py``). docs/bench.md, "The claims study",
states every rule. It reads records with ``fl_async.bench`` and is no part of the package.
"""
