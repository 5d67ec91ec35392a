"""FedProx's Synthetic(α, β): reproducible per device, the stated size law, the stated feature
distribution, what α and β change, and loading through ``load_dataset``."""

import math

import numpy as np
import pytest
import torch

from fl_async.data import load_dataset, load_labels, load_owners
from fl_async.data import synthetic as synthetic_module
from fl_async.data.synthetic import (
    MIN_SAMPLES,
    NUM_CLASSES,
    NUM_FEATURES,
    Synthetic,
    feature_std,
    train_size,
)
from fl_async.validation import InvalidArgument


def label_shares(spec: Synthetic) -> np.ndarray:
    """Each device's label distribution over its train examples (devices x classes)."""
    counts = np.zeros((spec.devices, NUM_CLASSES))
    np.add.at(counts, (spec.owners(), spec.labels()), 1)
    return counts / counts.sum(axis=1, keepdims=True)


def test_shapes_dtypes_and_label_range():
    x, y = Synthetic(devices=3).generate(2)
    assert x.dtype == np.float32 and x.shape == (len(y), NUM_FEATURES)
    assert y.dtype == np.int64 and y.min() >= 0 and y.max() < NUM_CLASSES
    data = load_dataset("synthetic", synthetic=Synthetic(devices=4))
    assert data.name == "synthetic" and data.num_classes == NUM_CLASSES
    assert data.input_shape == (NUM_FEATURES,)
    assert data.train.features.dtype == torch.float32 and data.test.labels.dtype == torch.int64
    assert data.owners.dtype == np.int64 and data.owners.shape == (len(data.train),)


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data():
    first, again = Synthetic(devices=5, seed=3).load(), Synthetic(devices=5, seed=3).load()
    assert torch.equal(first.train.features, again.train.features)
    assert torch.equal(first.test.labels, again.test.labels)
    other = Synthetic(devices=5, seed=4).generate(0)[0]
    assert not np.array_equal(other[:10], Synthetic(devices=5, seed=3).generate(0)[0][:10])


def test_a_device_does_not_depend_on_the_number_of_devices_or_the_order():
    few, many = Synthetic(devices=4), Synthetic(devices=10_000)
    for k in (0, 3):
        for a, b in zip(few.generate(k), many.generate(k), strict=True):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(few.sizes(), many.sizes()[:4])
    forward, backward = few.load([1, 3]), few.load([3, 1])
    keep = train_size(few.size(1))
    np.testing.assert_array_equal(
        forward.train.features[:keep].numpy(), backward.train.features[-keep:].numpy()
    )
    np.testing.assert_array_equal(
        forward.owners, np.repeat([1, 3], train_size(few.sizes()[[1, 3]]))
    )


def test_features_drawn_in_blocks_equal_one_draw(monkeypatch):
    spec = Synthetic(devices=2)
    whole = spec.generate(1)
    monkeypatch.setattr(synthetic_module, "_CHUNK", 7)
    for a, b in zip(whole, spec.generate(1), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(spec.labels(), Synthetic(devices=2).load().train.labels.numpy())


def test_sizes_follow_int_lognormal_4_2_plus_50():
    sizes = Synthetic(devices=3000).sizes()
    assert sizes.min() >= MIN_SAMPLES
    # P(n <= m) = P(lognormal(4, 2) < m - 49) = Φ((ln(m - 49) - 4) / 2); 3,000 draws put each
    # empirical value within ~0.01 (one standard error) of it.
    for m in (60, 105, 300, 1000, 10_000):
        law = 0.5 * (1 + math.erf((math.log(m - 49) - 4) / 2 / math.sqrt(2)))
        assert np.mean(sizes <= m) == pytest.approx(law, abs=0.035)
    assert sizes.max() > 100 * np.median(sizes)  # heavy tail


def test_max_samples_caps_a_device_and_keeps_its_first_samples():
    spec, capped = Synthetic(devices=40), Synthetic(devices=40, max_samples=60)
    big = int(np.argmax(spec.sizes()))
    assert capped.sizes().max() == 60 and capped.size(big) == 60
    np.testing.assert_array_equal(capped.generate(big)[0], spec.generate(big)[0][:60])
    with pytest.raises(
        InvalidArgument, match=r"max_samples must be 0 \(no cap\) or at least 50 .*, got 10"
    ):
        Synthetic(max_samples=10)


def test_train_and_test_are_nine_tenths_and_the_rest_of_every_device():
    spec = Synthetic(devices=6)
    data = spec.load()
    sizes = spec.sizes()
    assert len(data.train) == int((sizes * 9 // 10).sum())
    assert len(data.test) == int((sizes - sizes * 9 // 10).sum())
    x, y = spec.generate(5)
    keep = train_size(len(y))
    np.testing.assert_array_equal(data.train.features[-keep:].numpy(), x[:keep])
    np.testing.assert_array_equal(data.test.labels[-(len(y) - keep) :].numpy(), y[keep:])


def test_features_of_a_large_device_have_mean_v_k_and_covariance_sigma():
    spec = Synthetic(devices=1000)
    k = int(np.argmax(spec.sizes()))
    x, y = spec.generate(k)
    model = spec.device_model(k)
    assert len(y) >= 10_000
    sigma = feature_std() ** 2
    np.testing.assert_allclose(sigma, np.arange(1, 61) ** -1.2)
    # Sample variance / Σ_jj has standard error sqrt(2 / n) < 0.015 here.
    np.testing.assert_allclose(x.var(axis=0, dtype=np.float64) / sigma, 1.0, atol=0.06)
    se = np.sqrt(sigma / len(y))
    assert np.all(np.abs(x.mean(axis=0, dtype=np.float64) - model.mean) < 5 * se)
    off = np.corrcoef(x[:, :10], rowvar=False)[np.triu_indices(10, 1)]
    assert np.abs(off).max() < 0.05  # Σ is diagonal
    logits = x.astype(np.float64) @ model.weight.T + model.bias
    np.testing.assert_array_equal(y, logits.argmax(axis=1))


def test_alpha_spreads_the_device_models_but_never_changes_their_data():
    for alpha in (0.5, 2.0):
        spec = Synthetic(alpha=alpha, devices=400)
        means = [spec.device_model(k).weight.mean() for k in range(spec.devices)]
        # mean(W_k) = u_k + noise of std 1/sqrt(600): its spread across devices is ~alpha.
        assert np.std(means) == pytest.approx(alpha, rel=0.15)
    # u_k shifts every class's logit by the same u_k (1 + Σ_j x_j): the softmax cancels it.
    plain, spread = Synthetic(alpha=0.0, devices=50), Synthetic(alpha=5.0, devices=50)
    np.testing.assert_array_equal(plain.labels(), spread.labels())
    np.testing.assert_array_equal(plain.generate(7)[0], spread.generate(7)[0])


def test_beta_concentrates_each_devices_labels_and_iid_spreads_them():
    def dominant_share(spec):
        return label_shares(spec).max(axis=1).mean()

    kwargs = {"devices": 300, "max_samples": 300}
    low, high = (dominant_share(Synthetic(beta=b, **kwargs)) for b in (0.0, 3.0))
    iid = dominant_share(Synthetic(iid=True, **kwargs))
    # Measured: 0.82 at β=0 and 0.92 at β=3 (seed 0); 0.34 for Synthetic-IID.
    assert high > low + 0.05
    assert iid < 0.5 < low
    shared = Synthetic(iid=True, devices=3)
    assert np.array_equal(shared.device_model(0).weight, shared.device_model(2).weight)
    assert not shared.device_model(1).mean.any()


def test_load_labels_and_owners_match_load_dataset_without_the_features():
    spec = Synthetic(alpha=0.5, beta=0.5, devices=7, seed=2)
    data = load_dataset("synthetic", synthetic=spec)
    np.testing.assert_array_equal(load_labels("synthetic", synthetic=spec), data.train.labels)
    np.testing.assert_array_equal(load_owners("synthetic", synthetic=spec), data.owners)
    labels, test = spec.labels_and_test()
    np.testing.assert_array_equal(labels, data.train.labels)
    assert torch.equal(test.features, data.test.features) and torch.equal(
        test.labels, data.test.labels
    )
    default = load_dataset("synthetic")
    assert default.owners.max() == 29  # FedProx's 30 devices


def test_bad_parameters_are_named():
    with pytest.raises(InvalidArgument, match="alpha must be a finite number >= 0, got -1"):
        Synthetic(alpha=-1)
    with pytest.raises(InvalidArgument, match="devices must be an integer >= 1, got 0"):
        Synthetic(devices=0)
    with pytest.raises(InvalidArgument, match="iid must be True or False"):
        Synthetic(iid=1)
    with pytest.raises(InvalidArgument, match=r"device must be an integer in \[0, 2\], got 3"):
        Synthetic(devices=3).generate(3)
    with pytest.raises(InvalidArgument, match="parameters of dataset 'synthetic', not 'mnist'"):
        load_dataset("mnist", synthetic=Synthetic())
    with pytest.raises(InvalidArgument, match="devices must name at least one device"):
        Synthetic().load([])
