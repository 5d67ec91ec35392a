"""``load_dataset``, ``load_labels`` and ``load_owners``: one name picks the dataset and where it
is read from (or, for ``synthetic``, how it is generated)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np

from fl_async.data.embedded import load_mnist, mnist_labels
from fl_async.data.sources import HUB_ID, HUB_IDS, default_root, fetch_command
from fl_async.data.split import DEFAULT_SPLIT_SEED, DEFAULT_TEST_FRACTION
from fl_async.data.synthetic import NAME as SYNTHETIC
from fl_async.data.synthetic import Synthetic
from fl_async.data.torchvision_files import TORCHVISION_SETS
from fl_async.validation import InvalidArgument, check_choice

if TYPE_CHECKING:
    import datasets

    from fl_async.data.imageset import FederatedData

Source = Literal["auto", "torchvision", "huggingface"]
SOURCES: tuple[str, ...] = get_args(Source)
"""Where ``load_dataset(source=...)`` reads from; ``"auto"``: torchvision's files, else the Hub."""

NAMES: tuple[str, ...] = (
    *HUB_IDS,
    SYNTHETIC,
    "imagefolder:<path>",
    "disk:<path>",
    "<Hugging Face id, e.g. uoft-cs/cifar10>",
    "<path to a parquet/arrow dataset>",
)
"""What ``load_dataset`` accepts as a name: the known datasets, then the forms of the others."""


@dataclass(frozen=True)
class _Plan:
    """How to read one dataset: ``kind`` of reader and its ``target`` (name, Hub id or path)."""

    kind: Literal["embedded", "torchvision", "hub", "auto-hub", "path", "disk", "folder"]
    target: str


def load_dataset(
    name: str = "mnist",
    *,
    root: str | os.PathLike[str] | None = None,
    source: Source = "auto",
    download: bool = False,
    image_column: str | None = None,
    label_column: str | None = None,
    owner_column: str | None = None,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    split_seed: int = DEFAULT_SPLIT_SEED,
    synthetic: Synthetic | None = None,
) -> FederatedData:
    """Load ``name`` into in-memory uint8 tensors with a train and a test split.

    ``mnist`` with ``source="auto"`` is the 5,000 embedded digits (4,000 train / 1,000 test).
    ``root`` is torchvision's folder, or the Hugging Face cache for Hub ids; nothing is
    downloaded unless ``download`` is True. Datasets without a test split hold out
    ``test_fraction`` of each class, fixed by ``split_seed``. ``image_column`` and
    ``label_column`` name Hugging Face columns when guessing fails; ``owner_column`` names the
    column of each example's owner (default ``writer_id`` when present), read into ``owners``.
    ``synthetic`` is generated, never read: ``synthetic=Synthetic(...)`` sets its parameters
    (default FedProx's Synthetic(1, 1) over 30 devices), its owners are the devices.
    See docs/data.md.
    """
    if name == SYNTHETIC or synthetic is not None:
        return _synthetic(name, synthetic).load()
    plan = _plan(name, source=source, root=root, download=download)
    if owner_column is not None and plan.kind in _WITHOUT_OWNERS:
        raise _no_owners(name)
    local = _load_local(
        plan, root, download=download, test_fraction=test_fraction, split_seed=split_seed
    )
    if local is not None:
        return local
    opened = _open_hf(plan, name=name, root=root, download=download)  # refuses a missing one
    from fl_async.data.hf import to_federated  # only now: it imports torch and datasets

    return to_federated(
        name,
        opened,
        image_column=image_column,
        label_column=label_column,
        test_fraction=test_fraction,
        split_seed=split_seed,
        owner_column=owner_column,
    )


def _load_local(
    plan: _Plan,
    root: str | os.PathLike[str] | None,
    *,
    download: bool,
    test_fraction: float,
    split_seed: int,
) -> FederatedData | None:
    """``plan``'s dataset if a reader without ``datasets`` reads it (embedded, torchvision's
    files, an image folder), else None."""
    if plan.kind == "embedded":
        return load_mnist(test_fraction=test_fraction, split_seed=split_seed)
    if plan.kind == "torchvision":
        from fl_async.data.torchvision_files import load_torchvision

        return load_torchvision(plan.target, root=_root(root), download=download)
    if plan.kind == "folder":
        from fl_async.data.folder import load_folder

        return load_folder(Path(plan.target), test_fraction=test_fraction, split_seed=split_seed)
    return None


def load_labels(
    name: str = "mnist",
    *,
    root: str | os.PathLike[str] | None = None,
    source: Source = "auto",
    download: bool = False,
    label_column: str | None = None,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    split_seed: int = DEFAULT_SPLIT_SEED,
    synthetic: Synthetic | None = None,
) -> np.ndarray:
    """Labels (int64) of the train split ``load_dataset`` builds with the same arguments, read
    without decoding images where the format allows (generated without keeping features)."""
    if name == SYNTHETIC or synthetic is not None:
        return _synthetic(name, synthetic).labels()
    plan = _plan(name, source=source, root=root, download=download)
    if plan.kind == "embedded":
        return mnist_labels(test_fraction=test_fraction, split_seed=split_seed)
    if plan.kind == "torchvision":
        from fl_async.data.torchvision_files import torchvision_labels

        return torchvision_labels(plan.target, root=_root(root), download=download)
    if plan.kind == "folder":
        from fl_async.data.folder import folder_labels

        return folder_labels(Path(plan.target), test_fraction=test_fraction, split_seed=split_seed)
    opened = _open_hf(plan, name=name, root=root, download=download)  # refuses a missing one
    from fl_async.data.hf import train_labels  # only now: it imports torch and datasets

    return train_labels(
        opened,
        label_column=label_column,
        test_fraction=test_fraction,
        split_seed=split_seed,
    )


def load_owners(
    name: str,
    *,
    root: str | os.PathLike[str] | None = None,
    source: Source = "auto",
    download: bool = False,
    owner_column: str | None = None,
    label_column: str | None = None,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    split_seed: int = DEFAULT_SPLIT_SEED,
    synthetic: Synthetic | None = None,
) -> np.ndarray:
    """Owners (int64) of the train split: exactly ``load_dataset(...).owners`` with the same
    arguments, read without decoding images (``synthetic``: without drawing a sample).
    InvalidArgument if the dataset has none."""
    if name == SYNTHETIC or synthetic is not None:
        return _synthetic(name, synthetic).owners()
    plan = _plan(name, source=source, root=root, download=download)
    if plan.kind in _WITHOUT_OWNERS:
        raise _no_owners(name)
    opened = _open_hf(plan, name=name, root=root, download=download)  # refuses a missing one
    from fl_async.data.hf import train_owners  # only now: it imports torch and datasets

    owners = train_owners(
        opened,
        owner_column=owner_column,
        label_column=label_column,
        test_fraction=test_fraction,
        split_seed=split_seed,
    )
    if owners is None:
        raise _no_owners(name)
    return owners


# Readers whose datasets never name an owner per example.
_WITHOUT_OWNERS = ("embedded", "torchvision", "folder")


def _no_owners(name: str) -> InvalidArgument:
    return InvalidArgument(
        f"dataset {name!r} has no natural owners; natural works with: femnist, synthetic, or a "
        "Hugging Face dataset with an owner column (a 'writer_id' column, or the one named by "
        "owner_column=..., run config partition.owner-column)"
    )


def _synthetic(name: str, synthetic: Synthetic | None) -> Synthetic:
    if name != SYNTHETIC:
        raise InvalidArgument(
            f"synthetic= sets the parameters of dataset {SYNTHETIC!r}, not {name!r}"
        )
    if synthetic is None:
        return Synthetic()
    if not isinstance(synthetic, Synthetic):
        raise InvalidArgument(f"synthetic must be a Synthetic or None, got {synthetic!r}")
    return synthetic


def _root(root: str | os.PathLike[str] | None) -> Path:
    return default_root() if root is None else Path(root).expanduser()


def _plan(name: str, *, source: str, root: str | os.PathLike[str] | None, download: bool) -> _Plan:
    check_choice("source", source, SOURCES)
    for prefix, kind in (("imagefolder:", "folder"), ("disk:", "disk")):
        if name.startswith(prefix):
            return _Plan(kind, str(Path(name.removeprefix(prefix)).expanduser()))
    if name in HUB_IDS and name not in TORCHVISION_SETS and source != "torchvision":
        return _Plan("hub", HUB_IDS[name])  # on the Hub only (femnist)
    if name in TORCHVISION_SETS:
        if source == "huggingface":
            return _Plan("hub", HUB_IDS[name])
        if source == "torchvision":
            return _Plan("torchvision", name)
        if name == "mnist":
            return _Plan("embedded", name)
        if download or not TORCHVISION_SETS[name].missing(_root(root)):
            return _Plan("torchvision", name)
        return _Plan("auto-hub", name)
    if source == "torchvision":
        raise InvalidArgument(f"torchvision reads only {', '.join(TORCHVISION_SETS)}; got {name!r}")
    if name and Path(name).expanduser().exists():
        return _Plan("path", str(Path(name).expanduser()))
    if HUB_ID.match(name):
        return _Plan("hub", name)
    raise InvalidArgument(f"unknown dataset {name!r}; choose one of: {', '.join(NAMES)}")


def _open_hf(
    plan: _Plan, *, name: str, root: str | os.PathLike[str] | None, download: bool
) -> datasets.DatasetDict | datasets.Dataset:
    hf_root = None if root is None else Path(root).expanduser()
    if plan.kind in ("path", "disk"):
        from fl_async.data.hf import open_disk, open_path

        target = Path(plan.target)
        return open_path(target, root=hf_root) if plan.kind == "path" else open_disk(target)
    # The snapshot first: a missing dataset is refused before torch and datasets are imported.
    from fl_async.data.hub_cache import hub_snapshot

    if plan.kind == "hub":
        snapshot = hub_snapshot(plan.target, root=hf_root, download=download)
    else:  # a named set whose torchvision files are not under root: its Hub copy, or neither
        try:
            snapshot = hub_snapshot(HUB_IDS[plan.target], root=hf_root, download=False)
        except FileNotFoundError as error:
            spec = TORCHVISION_SETS[plan.target]
            raise FileNotFoundError(
                f"{name} not found: looked for torchvision's files in "
                f"{spec.location(_root(root))} and for {HUB_IDS[plan.target]} in the Hugging "
                f"Face cache; fetch it with: {fetch_command(plan.target, _root(root))}"
            ) from error
    from fl_async.data.hf import open_path

    return open_path(snapshot, root=hf_root)
