"""The optional packages of fl-async's extras, looked for before a run starts.

``pip install fl-async`` is what a device needs to run the ClientApp; the simulation engine
(Ray), plotting and the dataset readers come with the ``simulation`` extra, TensorBoard and
MLflow logging with the ``tracking`` extra (docs/running.md).
"""

from __future__ import annotations

import importlib.util

INSTALL_SIMULATION = "pip install 'fl-async[simulation]'"


def require(what: str, *modules: str, install: str = INSTALL_SIMULATION) -> None:
    """Raise ``ModuleNotFoundError`` naming the extra to install (``install``, the command) when
    any of the top-level ``modules`` is missing (found without importing them)."""
    missing = [name for name in modules if not _installed(name)]
    if missing:
        raise ModuleNotFoundError(f"{what} needs {', '.join(missing)} (not installed): {install}")


def _installed(name: str) -> bool:
    spec = importlib.util.find_spec(name)
    # A bare folder of that name (e.g. Ray's session folder /tmp/ray, when the working directory
    # is /tmp) is found as a namespace package, without an origin: not the package.
    return spec is not None and spec.origin is not None
