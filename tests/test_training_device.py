"""Device choice, with CUDA and MPS availability monkeypatched (this machine has neither)."""

import pytest
import torch

from fl_async.clients import select_device


@pytest.fixture
def gpus(monkeypatch):
    """Pretend ``count`` CUDA devices and MPS availability as asked."""

    def fake(count=0, mps=False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)

    return fake


def test_auto_prefers_cuda_then_mps_then_cpu(gpus):
    gpus(count=2, mps=True)
    assert select_device() == torch.device("cuda")
    gpus(count=0, mps=True)
    assert select_device("auto") == torch.device("mps")
    gpus(count=0, mps=False)
    assert select_device() == torch.device("cpu")


def test_named_devices(gpus):
    gpus(count=2)
    assert select_device("cuda") == torch.device("cuda")
    assert select_device("cuda:1") == torch.device("cuda", 1)
    assert select_device(" CPU ") == torch.device("cpu")


def test_unavailable_devices_raise_instead_of_falling_back(gpus):
    gpus(count=1)
    with pytest.raises(RuntimeError, match="1 CUDA device"):
        select_device("cuda:1")
    with pytest.raises(RuntimeError, match="'mps' is not available"):
        select_device("mps")
    gpus(count=0)
    with pytest.raises(RuntimeError, match="nvidia-smi"):
        select_device("cuda")


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "tpu", ""])
def test_unknown_devices_list_the_choices(name):
    with pytest.raises(ValueError, match="auto, cpu, cuda, cuda:<index>, mps"):
        select_device(name)


def test_this_machine_falls_back_to_cpu():
    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("an accelerator is present")
    assert select_device() == torch.device("cpu")
