"""Local training and evaluation on the embedded MNIST: learning, determinism, the proximal term."""

import re

import numpy as np
import pytest
import torch
from fresh_python import python_stdout

from fl_async.clients import evaluate, train
from fl_async.clients.sgd import LocalSGD
from fl_async.data import load_dataset
from fl_async.models import build_model
from fl_async.validation import InvalidArgument

PART = np.arange(256)


@pytest.fixture(scope="module")
def mnist():
    return load_dataset()


def cnn(seed=0):
    return build_model("cnn", num_classes=10, in_channels=1, image_size=28, seed=seed)


def distance(model, start):
    return sum(
        float((p.detach() - s).square().sum())
        for p, s in zip(model.parameters(), start, strict=True)
    )


def test_loss_falls_within_a_few_steps(mnist):
    model = cnn()
    before = evaluate(model, mnist.train, PART)
    metrics = train(model, mnist.train, PART, steps=40, lr=0.1, seed=0)
    after = evaluate(model, mnist.train, PART)
    assert after["loss"] < 0.5 * before["loss"]
    assert after["accuracy"] > 0.6 > before["accuracy"]
    assert metrics["train-loss"] < before["loss"]
    assert evaluate(model, mnist.test)["accuracy"] > 0.5  # it generalises, well above chance


def test_same_seed_gives_bit_identical_weights(mnist):
    def run(seed):
        model = cnn()
        metrics = train(model, mnist.train, PART[:100], epochs=2, momentum=0.9, seed=seed)
        return model.state_dict(), metrics

    (first, first_metrics), (again, again_metrics) = run(7), run(7)
    assert all(torch.equal(first[key], again[key]) for key in first)
    assert first_metrics == again_metrics
    other, _ = run(8)
    assert not all(torch.equal(first[key], other[key]) for key in first)


def test_training_leaves_the_global_random_stream_alone(mnist):
    state = torch.random.get_rng_state()
    train(cnn(), mnist.train, PART[:64], steps=2, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_proximal_term_pulls_towards_the_start(mnist):
    def moved(mu):
        model = cnn()
        start = [p.detach().clone() for p in model.parameters()]
        train(model, mnist.train, PART, steps=20, lr=0.05, proximal_mu=mu, seed=0)
        return distance(model, start)

    free, pulled, held = moved(0.0), moved(2.0), moved(20.0)
    assert held < pulled < free
    # lr·mu = 1: every step restarts from the start weights, so they barely move.
    assert held < 0.05 * free


def test_steps_and_epochs_are_counted(mnist):
    by_steps = train(cnn(), mnist.train, PART[:50], steps=7, batch_size=32, seed=0)
    # 50 examples make batches of 32 and 18; seven steps span four passes.
    assert by_steps["steps"] == 7
    assert by_steps["examples-processed"] == 3 * 50 + 32
    assert by_steps["num-examples"] == 50
    by_epochs = train(cnn(), mnist.train, PART[:100], epochs=2, batch_size=32, seed=0)
    assert by_epochs["steps"] == 8
    assert by_epochs["examples-processed"] == 200 and by_epochs["num-examples"] == 100


def test_metrics_are_plain_numbers(mnist):
    metrics = train(cnn(), mnist.train, PART[:40], steps=1, seed=0)
    assert set(metrics) == {
        "train-loss",
        "train-accuracy",
        "num-examples",
        "examples-processed",
        "steps",
    }
    assert type(metrics["train-loss"]) is float and type(metrics["train-accuracy"]) is float
    assert all(type(metrics[key]) is int for key in ("num-examples", "examples-processed", "steps"))
    result = evaluate(cnn(), mnist.test)
    assert set(result) == {"loss", "accuracy", "num-examples"}
    assert type(result["loss"]) is float and result["num-examples"] == 1000


def test_bad_arguments_are_rejected(mnist):
    with pytest.raises(ValueError, match="exactly one"):
        train(cnn(), mnist.train, PART, seed=0)
    with pytest.raises(ValueError, match="exactly one"):
        train(cnn(), mnist.train, PART, epochs=1, steps=1, seed=0)
    with pytest.raises(ValueError, match="at least 1"):
        train(cnn(), mnist.train, PART, steps=0, seed=0)
    with pytest.raises(ValueError, match="empty"):
        train(cnn(), mnist.train, [], steps=1, seed=0)
    with pytest.raises(ValueError, match="proximal_mu"):
        train(cnn(), mnist.train, PART, steps=1, proximal_mu=-1.0, seed=0)
    with pytest.raises(IndexError):
        train(cnn(), mnist.train, [len(mnist.train)], steps=1, seed=0)


def test_evaluate_restores_the_mode_and_covers_everything(mnist):
    model = build_model("resnet8", num_classes=10, in_channels=1, image_size=28, seed=0)
    model.train()
    everything = evaluate(model, mnist.test, batch_size=300)
    assert model.training and everything["num-examples"] == 1000
    part = evaluate(model, mnist.test, np.arange(100))
    assert part["num-examples"] == 100 and 0.0 <= part["accuracy"] <= 1.0


def test_batchnorm_model_trains_and_updates_running_stats(mnist):
    model = build_model("resnet8", num_classes=10, in_channels=1, image_size=28, seed=0)
    metrics = train(model, mnist.train, PART[:64], steps=2, batch_size=32, seed=0, device="cpu")
    assert metrics["steps"] == 2
    assert int(model.state_dict()["stem.1.num_batches_tracked"]) == 2


@pytest.mark.parametrize(("momentum", "weight_decay"), [(0.0, 0.0), (0.9, 0.0), (0.5, 1e-3)])
def test_local_sgd_gives_torch_optim_sgds_weights_bit_for_bit(momentum, weight_decay):
    """Five steps of LocalSGD and of torch.optim.SGD from the same weights and batches: equal
    parameters after every step (that training imports no torch._dynamo is the test below)."""
    models = [cnn(seed=3), cnn(seed=3)]
    ours = LocalSGD(
        list(models[0].parameters()), lr=0.05, momentum=momentum, weight_decay=weight_decay
    )
    theirs = torch.optim.SGD(
        models[1].parameters(), lr=0.05, momentum=momentum, weight_decay=weight_decay
    )
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):
        x = torch.randn(8, 1, 28, 28, generator=generator)
        y = torch.randint(0, 10, (8,), generator=generator)
        for model, optimizer in zip(models, (ours, theirs), strict=True):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("setting", ["lr", "momentum", "weight_decay"])
def test_local_sgd_refuses_a_negative_setting_naming_it(setting):
    values = {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0, setting: -1.0}
    message = f"{setting} must be a number (inf allowed) >= 0, got -1.0"
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        LocalSGD([torch.zeros(2, requires_grad=True)], **values)


def test_training_in_a_fresh_process_imports_no_torch_dynamo():
    """torch.optim's optimizers import torch._dynamo when built (about a second); train() does
    not need it."""
    code = (
        "import sys, torch\n"
        "from fl_async.clients import train\n"
        "from fl_async.data.features import FeatureSet\n"
        "from fl_async.models import build_model\n"
        "data = FeatureSet(torch.randn(40, 5), torch.randint(0, 3, (40,)))\n"
        "model = build_model('logreg', num_classes=3, num_features=5)\n"
        "train(model, data, steps=3, lr=0.1, momentum=0.9)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    assert python_stdout(code).strip() == "False"
