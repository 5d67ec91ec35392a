"""Where each named dataset comes from, where its files go, and the command that fetches one.

The loaders (``loader``, ``hf``, ``torchvision_files``) name that command in their errors and
``download`` fetches with it, so it lives here, below all of them.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

HUB_IDS: dict[str, str] = {
    "mnist": "ylecun/mnist",
    "fashion-mnist": "zalando-datasets/fashion_mnist",
    "cifar10": "uoft-cs/cifar10",
    "cifar100": "uoft-cs/cifar100",
    "femnist": "flwrlabs/femnist",
}
"""The named datasets on the Hugging Face Hub."""
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""The form of a Hugging Face dataset id, ``owner/name``."""
TORCHVISION_DOWNLOADS: tuple[str, ...] = ("fashion-mnist", "cifar10", "cifar100")
"""Named datasets fetched with torchvision's downloaders (and their md5 sums)."""
HUB_DOWNLOADS: dict[str, str] = {"femnist": HUB_IDS["femnist"]}
"""Named datasets fetched from the Hugging Face Hub, with their dataset ids."""
DOWNLOADS: tuple[str, ...] = (*TORCHVISION_DOWNLOADS, *HUB_DOWNLOADS)
"""Every name ``fl-async data download`` takes (besides a Hugging Face dataset id)."""


def default_root() -> Path:
    """Where torchvision files live unless ``root`` is given: ``$FL_ASYNC_DATA`` or
    ``~/.cache/fl-async``."""
    return Path(os.environ.get("FL_ASYNC_DATA", "~/.cache/fl-async")).expanduser()


def is_hub_download(name: str) -> bool:
    """Whether ``name`` (a download name or a Hub id) is fetched from the Hugging Face Hub."""
    return name in HUB_DOWNLOADS or name not in TORCHVISION_DOWNLOADS


def fetch_command(name: str, root: str | os.PathLike[str] | None) -> str:
    """The shell command that fetches ``name`` (a dataset name or a Hub id) into ``root``;
    ``--root`` is left out where the loader would look anyway."""
    short = {repo: short for short, repo in HUB_DOWNLOADS.items()}.get(name, name)
    command = f"fl-async data download {short}"
    if root is None:
        return command
    path = Path(root).expanduser()
    if is_hub_download(short) or path != default_root():
        command += f" --root {shlex.quote(str(path))}"
    return command
