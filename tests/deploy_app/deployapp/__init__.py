"""A tiny numpy Flower App that runs fl_async strategies on Flower's deployment engine."""
