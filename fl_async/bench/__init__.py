"""Benchmarks: strategies side by side on the same partitions, node speeds and seeds.

``metrics`` (pure functions of an evaluation series), ``grid`` (each run's accuracy at G equally
spaced virtual times, recorded or derived), ``stats`` (paired-seed bootstrap intervals),
``scenarios`` (issue 6's settings), ``runner`` (a suite's settings and one ``python -m
fl_async.app`` per run, resumable), ``schedule`` (the runs K at a time), ``launch`` (their
subprocesses), ``progress`` (run k of n, time left), ``sweep`` and ``tuning`` (grid files, the
best point of each strategy, tuned records), ``records`` (a run as a small JSON record, what
the report reads), ``summary`` and ``table`` (rows over seeds, Markdown), ``report`` (report,
plots, JSON), ``export`` (a suite's records folder), ``engines`` (a suite's runs in one Flower
simulation, or each in its own) and ``provenance`` (what made a record), and ``cli``
(``fl-async bench``'s options), ``options`` (the suite they describe) and ``commands`` (what it
does). docs/bench.md describes them. A particular study's own code (the claims study's checks,
verdicts and generated tables) lives beside its records in ``benchmarks/``.
"""
