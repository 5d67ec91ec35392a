"""The Flower App: the ``ServerApp`` and ``ClientApp`` that ``flwr run .`` starts.

``fl_async.app.server_app:app`` and ``fl_async.app.client_app:app`` (pyproject.toml's
``[tool.flwr.app.components]``); ``python -m fl_async.app`` runs them in a local simulation and
stops the SuperLink it started. Every run-config key is in ``fl_async.config``.
"""
