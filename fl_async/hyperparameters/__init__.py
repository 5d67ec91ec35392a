"""Every rule's one declaration: its preset's hyperparameters, their defaults and one-line docs.

The run config's ``<preset>.<key>`` tables (``fl_async.config.PRESET_TABLES``), the presets'
keyword defaults and the docs' hyperparameter tables are derived from ``DECLARATIONS``. It
imports only ``fl_async.validation``, so the ClientApp reads it without any server code.
Adding a rule adds its ``Declaration`` to a ``DECLARED`` tuple here (docs/architecture.md,
Adding a rule).
"""

from fl_async.hyperparameters import descendants, presets
from fl_async.hyperparameters.declaration import (
    PRESET_DEFAULT,
    Declaration,
    Default,
    Hyper,
    registry,
)
from fl_async.hyperparameters.presets import AUTO, TUNED_LR

DECLARATIONS: dict[str, Declaration] = registry(presets.DECLARED, descendants.DECLARED)
"""Every rule's declaration by its preset's run-config name, in the order presets are listed."""

__all__ = [
    "AUTO",
    "DECLARATIONS",
    "PRESET_DEFAULT",
    "TUNED_LR",
    "Declaration",
    "Default",
    "Hyper",
    "registry",
]
