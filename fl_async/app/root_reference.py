"""The app's root dataset and reference update for the update guard (``guard.root-examples``).

The ServerApp draws ``guard.root-examples`` examples from the run's pooled training set with
the run's seed, and ``RootReference`` trains on them from an update's base model exactly as a
node trains on its partition (``fl_async.clients.training.train``, the run's model, local
epochs or steps, lr, batch size, momentum, weight decay): the guard judges each update by its
cosine with that reference (docs/algorithms.md, The update guard).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fl_async.app.config import AppConfig
from fl_async.clients import training
from fl_async.clients.device import limit_torch_threads, select_device
from fl_async.clients.node_data import RunData, new_model, pooled_train
from fl_async.config import TrainSpec
from fl_async.data import Examples
from fl_async.models import get_weights, set_weights

ROOT_SEED = 0x526F6F74
"""Mixed with the run's seed for the root sample's draw and each reference's batch order, so that
neither repeats a node's (tasks are seeded by the run's seed, node and task index)."""


class RootReference:
    """``(base arrays, version) -> base − trained``: the model ``base`` trained on the root
    sample ``data[index]`` with ``spec``; the batch order is seeded by ``seed`` and ``version``."""

    def __init__(
        self,
        model: torch.nn.Module,
        data: Examples,
        index: np.ndarray,
        spec: TrainSpec,
        *,
        seed: int,
        device: torch.device,
        threads: int = 0,
    ) -> None:
        self.model, self.data, self.index, self.spec = model, data, index, spec
        self.seed, self.device, self.threads = seed, device, threads

    def __repr__(self) -> str:
        return f"RootReference(examples={len(self.index)}, seed={self.seed}, {self.spec})"

    def __call__(self, base: list[np.ndarray], version: int) -> list[np.ndarray]:
        """The reference update of the model ``base`` made at server step ``version``."""
        limit_torch_threads(self.threads)
        set_weights(self.model, base)
        words = [ROOT_SEED, self.seed, version]
        training.train_task(
            self.model,
            self.data,
            self.index,
            self.spec,
            device=self.device,
            seed=int(np.random.SeedSequence(words).generate_state(1)[0]),
        )
        return _difference(base, get_weights(self.model))


def root_reference(config: AppConfig, data: RunData) -> RootReference | None:
    """The run's ``RootReference`` (None when ``guard.root-examples`` is 0): its sample drawn
    from the pooled training set with the run's seed, its settings the tasks' own."""
    size = int(config.values["guard.root-examples"])
    if size == 0:
        return None
    pool = pooled_train(config.data, config.num_nodes)
    rng = np.random.default_rng([ROOT_SEED, config.seed])
    index = np.sort(rng.choice(len(pool), size=min(size, len(pool)), replace=False))
    # A preset's own task settings (FedAsync's proximal-mu) as its tasks carry them.
    task = {}
    if "proximal_mu" in config.hyperparameters:
        task["proximal-mu"] = config.hyperparameters["proximal_mu"]
    model = new_model(config.data, data, seed=config.seed)
    spec = TrainSpec.from_configs(task, config.values)
    device, threads = select_device(config.device), int(config.values["threads"])
    return RootReference(model, pool, index, spec, seed=config.seed, device=device, threads=threads)


def _difference(base: Sequence[np.ndarray], trained: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``base − trained`` for floating arrays; zeros of the others (counters, not directions)."""
    return [
        b - t.astype(b.dtype) if b.dtype.kind == "f" else np.zeros_like(b)
        for b, t in zip(base, trained, strict=True)
    ]
