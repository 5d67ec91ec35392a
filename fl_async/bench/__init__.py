"""Benchmarks: strategies side by side on the same partitions, node speeds and seeds.

``metrics`` (pure functions of a run's evaluations), ``scenarios`` (issue 6's settings),
``runner`` (one ``python -m fl_async.app`` per run, resumable), ``report`` (table, plots, JSON)
and ``cli`` (``fl-async bench``). docs/bench.md describes them.
"""
