"""partition.scheme = 'natural' in the Flower App: the run config, the checks before a run, each
node's partition of a tiny FEMNIST (its run through the Flower App is in test_app_study.py)."""

import numpy as np
import pytest
from femnist_files import write_femnist

from fl_async.app import preflight
from fl_async.app.config import parse_run_config
from fl_async.clients.node_data import load_node_data
from fl_async.data import load_labels, load_owners
from fl_async.data_spec import DataSpec
from fl_async.partitioning import natural
from fl_async.validation import InvalidArgument


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A Hub cache holding a tiny FEMNIST: 8 writers of 15 characters each."""
    cache = tmp_path_factory.mktemp("hub")
    write_femnist(cache)
    return cache


def femnist_config(hub, **overrides):
    return {"dataset": "femnist", "data-root": str(hub), "partition.scheme": "natural", **overrides}


def test_the_run_config_takes_natural_and_an_owner_column(hub):
    spec = DataSpec.from_config(femnist_config(hub, **{"partition.owner-column": "hsf_id"}))
    assert (spec.scheme, spec.params, spec.owner_column) == ("natural", (), "hsf_id")
    assert DataSpec.from_config({}).owner_column == ""
    labels = np.zeros(4, dtype=np.int64)
    with pytest.raises(InvalidArgument, match="dataset 'mnist' has none; natural works with"):
        DataSpec.from_config({"partition.scheme": "natural"}).split(labels, 2)
    owners = np.array([3, 3, 9, 9])
    np.testing.assert_array_equal(
        spec.split(labels, 2, owners=owners)[0], natural(labels, 2, owners, 0)[0]
    )


def test_each_node_trains_on_whole_writers_and_the_server_agrees(hub):
    run_config = femnist_config(hub, seed=3)
    labels = load_labels("femnist", root=hub)
    owners = load_owners("femnist", root=hub)
    expected = natural(labels, 4, owners, 3)
    seen = []
    for k in range(4):
        node = load_node_data({"partition-id": k, "num-partitions": 4}, run_config)
        np.testing.assert_array_equal(node.train_index, expected[k])
        writers = set(node.data.owners[node.train_index].tolist())
        assert len(writers) == 2 and not writers & set().union(*seen)
        seen.append(writers)


def test_the_checks_before_a_run_name_what_is_wrong(hub, tmp_path):
    def check(**overrides):
        preflight.check_server_side(parse_run_config(overrides), tmp_path / "out")

    check(**femnist_config(hub, **{"num-nodes": 8}))  # one writer per node
    with pytest.raises(
        InvalidArgument,
        match=r"into num-nodes = 9 partitions with partition.scheme = 'natural': num_partitions "
        r"must be an integer in \[1, 8\], got 9; 8 is the number of distinct owners",
    ):
        check(**femnist_config(hub, **{"num-nodes": 9}))
    with pytest.raises(
        InvalidArgument,
        match="run config 'partition.scheme' = 'natural': dataset 'mnist' has no natural owners; "
        "natural works with: femnist, synthetic, or a Hugging Face dataset with an owner column",
    ):
        check(**{"partition.scheme": "natural"})
    with pytest.raises(
        InvalidArgument,
        match="'natural' and 'partition.owner-column' = 'user': no owner column 'user' among",
    ):
        check(**femnist_config(hub, **{"partition.owner-column": "user"}))
