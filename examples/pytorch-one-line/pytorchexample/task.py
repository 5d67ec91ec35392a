"""Model, data and training loop, written as in Flower's PyTorch quickstart."""

from __future__ import annotations

from functools import lru_cache

import torch
from flwr.app import ArrayRecord, MetricRecord
from torch import nn
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset

from fl_async.data import load_dataset, normalize
from fl_async.partitioning import iid


class Net(nn.Module):
    """A small CNN for 28x28 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = functional.max_pool2d(functional.relu(self.conv1(x)), 2)
        x = functional.max_pool2d(functional.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


@lru_cache(maxsize=1)
def _mnist():
    # The 5,000 real MNIST digits that ship inside a PyPI package: no download.
    return load_dataset("mnist")


def _as_dataset(images: torch.Tensor, labels: torch.Tensor, mean, std) -> TensorDataset:
    return TensorDataset(normalize(images, mean, std), labels)


def load_data(partition_id: int, num_partitions: int) -> tuple[DataLoader, DataLoader]:
    """This node's IID share of the training digits, and the test digits."""
    data = _mnist()
    parts = iid(data.train.labels.numpy(), num_partitions, seed=42)
    index = torch.from_numpy(parts[partition_id])
    train = _as_dataset(data.train.images[index], data.train.labels[index], data.mean, data.std)
    test = _as_dataset(data.test.images, data.test.labels, data.mean, data.std)
    loader = torch.Generator().manual_seed(partition_id)
    return DataLoader(train, batch_size=32, shuffle=True, generator=loader), DataLoader(test, 256)


def train(model: nn.Module, loader: DataLoader, epochs: int, lr: float) -> float:
    """Plain SGD; returns the mean training loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    total, batches = 0.0, 0
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
    return total / max(batches, 1)


def test(model: nn.Module, loader: DataLoader) -> tuple[float, float]:
    """Loss and accuracy."""
    model.eval()
    loss, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            loss += functional.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            seen += len(y)
    return loss / seen, correct / seen


def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """Evaluate the global model on the test digits (the server's evaluate_fn)."""
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    _, test_loader = load_data(0, 1)
    loss, accuracy = test(model, test_loader)
    return MetricRecord({"loss": loss, "accuracy": accuracy})
