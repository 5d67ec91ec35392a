"""Every rule's one declaration: its preset's hyperparameters, their defaults and one-line docs.

The run config's ``<preset>.<key>`` keys with their defaults and checks
(``fl_async.config.PRESET_TABLES``, ``SCHEMA``), the presets' keyword defaults,
``fl_async.strategies.PRESETS`` and the docs' hyperparameter tables are derived from
``DECLARATIONS``. It
imports only ``fl_async.validation``, so the ClientApp reads it without any server code.
Adding a rule adds its ``Declaration`` to a ``DECLARED`` tuple here (docs/architecture.md,
Adding a rule).
"""

from fl_async.hyperparameters import compass, descendants, presets
from fl_async.hyperparameters.declaration import (
    AUTO,
    PRESET_DEFAULT,
    Declaration,
    Default,
    Hyper,
    Values,
    choice,
    registry,
)
from fl_async.hyperparameters.presets import TUNED_LR

DECLARATIONS: dict[str, Declaration] = registry(
    presets.DECLARED, descendants.DECLARED, compass.DECLARED
)
"""Every rule's declaration by its preset's run-config name, in the order presets are listed."""

__all__ = [
    "AUTO",
    "DECLARATIONS",
    "PRESET_DEFAULT",
    "TUNED_LR",
    "Declaration",
    "Default",
    "Hyper",
    "Values",
    "choice",
    "registry",
]
