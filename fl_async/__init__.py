"""fl-async: asynchronous aggregation strategies for Flower."""

__version__ = "0.1.0"
