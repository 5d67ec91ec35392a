"""FedProx's Synthetic(α, β): a federated data set generated from a seed, for any number of devices.

Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020), section 5.1 and the
generator released with it (the LEAF benchmark's format). Device k has its own softmax model
``(W_k, b_k)`` and feature mean ``v_k``; α spreads the models across devices, β the features.
docs/data.md states every equation and what this module does where the paper is silent.

Device k draws everything from its own generator, ``numpy.random.default_rng([seed, 1, k])``:
its data depends on the seed and k alone, not on how many devices there are nor on the order in
which they are generated, so a node generates its own devices and nothing else. Features are
drawn ``_CHUNK`` rows at a time, which bounds the temporary memory of a large device and gives
the same rows as one draw would.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fl_async.validation import InvalidArgument, check_bool, check_int, check_number, check_seed

NAME = "synthetic"
NUM_FEATURES = 60
NUM_CLASSES = 10
FEDPROX_DEVICES = 30
"""FedProx's released data sets have 30 devices: the default outside a Flower run."""
SIZE_LOG_MEAN, SIZE_LOG_SIGMA, MIN_SAMPLES = 4.0, 2.0, 50
"""Samples of a device: ``int(lognormal(4, 2)) + 50``, as FedProx's generator draws them."""
TRAIN_TENTHS = 9
"""Each device's first ``⌊9 n / 10⌋`` samples train, the rest are its test samples (FedProx)."""

if TYPE_CHECKING:
    from fl_async.data.features import FeatureSet
    from fl_async.data.imageset import FederatedData

_DEVICE_STREAM, _SHARED_STREAM = 1, 2  # the middle word of each generator's seed
_CHUNK = 1 << 15  # rows per draw: a 7.9 MB float32 block, 16 MB of float64 logits


def feature_std(num_features: int = NUM_FEATURES) -> np.ndarray:
    """Standard deviation of feature j = 1..D: ``sqrt(Σ_jj)`` with ``Σ_jj = j^-1.2``."""
    return np.arange(1, num_features + 1, dtype=np.float64) ** -0.6


@dataclass(frozen=True)
class DeviceModel:
    """What device k's samples are drawn from: its size, feature mean and softmax model."""

    num_samples: int
    mean: np.ndarray
    """``v_k``, shape (D,)."""
    weight: np.ndarray
    """``W_k``, shape (classes, D)."""
    bias: np.ndarray
    """``b_k``, shape (classes,)."""


@dataclass(frozen=True)
class Synthetic:
    """Synthetic(α, β) over ``devices`` devices (``iid``: FedProx's Synthetic-IID instead).

    ``alpha`` and ``beta`` are standard deviations, as in FedProx's generator:
    ``u_k ~ N(0, α²)``, ``B_k ~ N(0, β²)``. ``max_samples`` > 0 caps each device's samples
    (0: FedProx's uncapped law); a capped device keeps its model and its first samples.
    """

    alpha: float = 1.0
    beta: float = 1.0
    devices: int = FEDPROX_DEVICES
    seed: int = 0
    iid: bool = False
    max_samples: int = 0

    def __post_init__(self) -> None:
        checked = {
            "alpha": check_number("alpha", self.alpha, minimum=0),
            "beta": check_number("beta", self.beta, minimum=0),
            "devices": check_int("devices", self.devices, minimum=1),
            "seed": check_seed("seed", self.seed),
            "max_samples": check_int("max_samples", self.max_samples, minimum=0),
        }
        if self.max_samples and self.max_samples < MIN_SAMPLES:
            raise InvalidArgument(
                f"max_samples must be 0 (no cap) or at least {MIN_SAMPLES} (every device's "
                f"minimum), got {self.max_samples}"
            )
        for name, value in {**checked, "iid": check_bool("iid", self.iid)}.items():
            object.__setattr__(self, name, value)

    # ------------------------------------------------------------------------- one device
    def device_model(self, device: int) -> DeviceModel:
        """Device ``device``'s size, feature mean and model (no samples drawn)."""
        return self._model(self._check_device(device))[1]

    def generate(self, device: int) -> tuple[np.ndarray, np.ndarray]:
        """All samples of ``device``: features (float32, n×60) and labels (int64, n)."""
        rng, model = self._model(self._check_device(device))
        features = np.empty((model.num_samples, NUM_FEATURES), dtype=np.float32)
        labels = np.empty(model.num_samples, dtype=np.int64)
        for start, block in self._blocks(rng, model):
            features[start : start + len(block)] = block
            labels[start : start + len(block)] = _labels(block, model)
        return features, labels

    def size(self, device: int) -> int:
        """Samples of ``device`` (train and test)."""
        return self._model(self._check_device(device))[1].num_samples

    # ------------------------------------------------------------------------ all devices
    def sizes(self) -> np.ndarray:
        """Samples of every device (int64), without drawing any sample."""
        return np.array([self._size(self._rng(k)) for k in range(self.devices)], dtype=np.int64)

    def owners(self) -> np.ndarray:
        """The device of every sample of the pooled train split (int64, sorted)."""
        train = train_size(self.sizes())
        return np.repeat(np.arange(self.devices, dtype=np.int64), train)

    def labels(self) -> np.ndarray:
        """Labels of the pooled train split (int64), generated device by device; the features
        are drawn to compute them but never held beyond one block."""
        return self._pool(range(self.devices), train_features=False, test_features=False)[1]

    def labels_and_test(self) -> tuple[np.ndarray, FeatureSet]:
        """The pooled train labels and the pooled test split in one pass over every device: what
        a server that splits and evaluates, but never trains, needs (no train features held)."""
        _, labels, test_x, test_y = self._pool(
            range(self.devices), train_features=False, test_features=True
        )
        return labels, _feature_set(test_x, test_y)

    def load(self, devices: Iterable[int] | None = None) -> FederatedData:
        """The train and test splits of ``devices`` (default: all), pooled in the order given:
        each device's first ``⌊9n/10⌋`` samples train, the others test; ``owners`` holds the
        device of every train example."""
        chosen = list(range(self.devices)) if devices is None else list(devices)
        if not chosen:
            raise InvalidArgument("devices must name at least one device, got none")
        train_x, train_y, test_x, test_y = self._pool(
            chosen, train_features=True, test_features=True
        )
        train = train_size(np.array([self.size(k) for k in chosen], dtype=np.int64))
        from fl_async.data.imageset import FederatedData

        return FederatedData(
            name=NAME,
            train=_feature_set(train_x, train_y),
            test=_feature_set(test_x, test_y),
            num_classes=NUM_CLASSES,
            owners=np.repeat(np.array(chosen, dtype=np.int64), train),
        )

    # -------------------------------------------------------------------------- internals
    def _check_device(self, device: int) -> int:
        return check_int("device", device, minimum=0, maximum=self.devices - 1)

    def _rng(self, device: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, _DEVICE_STREAM, device])

    def _size(self, rng: np.random.Generator) -> int:
        # The size is always the device's first draw: sizes() need draw nothing else.
        size = int(rng.lognormal(SIZE_LOG_MEAN, SIZE_LOG_SIGMA)) + MIN_SAMPLES
        return min(size, self.max_samples) if self.max_samples else size

    def _model(self, device: int) -> tuple[np.random.Generator, DeviceModel]:
        """Device ``device``'s generator, past the draws of its model, and the model."""
        rng = self._rng(device)
        size = self._size(rng)
        if self.iid:
            # Synthetic-IID: one model for all devices, features centred at 0 (FedProx).
            shared = np.random.default_rng([self.seed, _SHARED_STREAM])
            weight = shared.normal(0.0, 1.0, (NUM_CLASSES, NUM_FEATURES))
            bias = shared.normal(0.0, 1.0, NUM_CLASSES)
            return rng, DeviceModel(size, np.zeros(NUM_FEATURES), weight, bias)
        model_mean = rng.normal(0.0, self.alpha)  # u_k
        feature_centre = rng.normal(0.0, self.beta)  # B_k
        mean = rng.normal(feature_centre, 1.0, NUM_FEATURES)  # v_k
        weight = rng.normal(model_mean, 1.0, (NUM_CLASSES, NUM_FEATURES))  # W_k
        bias = rng.normal(model_mean, 1.0, NUM_CLASSES)  # b_k
        return rng, DeviceModel(size, mean, weight, bias)

    def _pool(
        self, devices: Iterable[int], *, train_features: bool, test_features: bool
    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None, np.ndarray]:
        """Train features and labels, test features and labels of ``devices`` pooled in that
        order (features None unless asked for), written block by block into arrays of their
        final size: the peak is the result plus one block."""
        devices = [self._check_device(k) for k in devices]
        sizes = np.array([self._size(self._rng(k)) for k in devices], dtype=np.int64)
        train = train_size(sizes)
        train_x = _empty(int(train.sum()))[0] if train_features else None
        train_y = np.empty(int(train.sum()), dtype=np.int64)
        test_x = _empty(int((sizes - train).sum()))[0] if test_features else None
        test_y = np.empty(int((sizes - train).sum()), dtype=np.int64)
        at_train = at_test = 0
        for k, keep in zip(devices, train.tolist(), strict=True):
            rng, model = self._model(k)
            for start, block in self._blocks(rng, model):
                labels = _labels(block, model)
                cut = min(len(block), max(0, keep - start))  # rows of this block that train
                if train_x is not None:
                    train_x[at_train : at_train + cut] = block[:cut]
                train_y[at_train : at_train + cut] = labels[:cut]
                rest = len(block) - cut
                if test_x is not None:
                    test_x[at_test : at_test + rest] = block[cut:]
                test_y[at_test : at_test + rest] = labels[cut:]
                at_train, at_test = at_train + cut, at_test + rest
        return train_x, train_y, test_x, test_y

    def _blocks(
        self, rng: np.random.Generator, model: DeviceModel
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, features)`` blocks of at most ``_CHUNK`` rows: x ~ N(v_k, Σ)."""
        scale = feature_std().astype(np.float32)
        mean = model.mean.astype(np.float32)
        for start in range(0, model.num_samples, _CHUNK):
            rows = min(_CHUNK, model.num_samples - start)
            block = rng.standard_normal((rows, NUM_FEATURES), dtype=np.float32)
            block *= scale
            block += mean
            yield start, block


def train_size(num_samples: np.ndarray | int) -> np.ndarray | int:
    """Training samples of a device with ``num_samples`` samples: ``⌊9 n / 10⌋``."""
    return num_samples * TRAIN_TENTHS // 10


def _feature_set(features: np.ndarray, labels: np.ndarray) -> FeatureSet:
    # torch here, not at the top: labels() and owners() serve the launcher, which runs without it.
    import torch

    from fl_async.data.features import FeatureSet

    return FeatureSet(torch.from_numpy(features), torch.from_numpy(labels))


def _labels(features: np.ndarray, model: DeviceModel) -> np.ndarray:
    """``y = argmax softmax(W_k x + b_k)``: the softmax keeps the order, so the logits' argmax.

    In float64, so rounding never decides a label; by ``einsum``'s own loop rather than BLAS,
    whose threads spin against other processes on a busy machine (14x slower measured on 2 cores).
    """
    logits = np.einsum("nd,cd->nc", features.astype(np.float64), model.weight)
    logits += model.bias
    return logits.argmax(axis=1)


def _empty(rows: int) -> tuple[np.ndarray, np.ndarray]:
    return np.empty((rows, NUM_FEATURES), dtype=np.float32), np.empty(rows, dtype=np.int64)
