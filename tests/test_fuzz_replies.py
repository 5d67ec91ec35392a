"""Replies fuzzed (Hypothesis): whatever a node sends, the parser raises only ValueError and
allocates nothing a payload does not carry, and every preset's loop survives, counts each bad
reply as a fault or a rejection, and never changes the model for a rejected update."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fakegrid import FakeGrid, initial_arrays, quadratic_fleet, task_identity
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from fuzzreplies import BAD_COUNTS, bad_train_replies, contents, reply_to
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib import format as npy

from fl_async import protocol
from fl_async.aggregators import Aggregator
from fl_async.scheduling import VirtualClock
from fl_async.strategies import PRESETS

TRAIN = ConfigRecord({"local-steps": 2, "lr": 0.3})
FIXTURE = HealthCheck.function_scoped_fixture  # monkeypatch: the same patch for every example
FUZZER = 3  # the partition id of the node that sends bad replies


@pytest.fixture(autouse=True, scope="module")
def _identity():
    with task_identity():
        yield


def _task() -> Message:
    content = RecordDict({"arrays": initial_arrays(), "config": ConfigRecord({"task-seed": 1})})
    return Message(content, dst_node_id=5, message_type="train", ttl=10)


@settings(max_examples=100, deadline=None)
@given(contents())
def test_the_parser_raises_only_value_error_and_returns_only_numeric_arrays(content):
    try:
        parsed = protocol.read_train_reply(reply_to(_task(), content))
    except ValueError:
        return
    assert all(isinstance(a, np.ndarray) and a.dtype.kind in "biuf" for a in parsed.arrays)
    assert 0 <= parsed.num_examples <= protocol.MAX_NUM_EXAMPLES


@settings(max_examples=50, deadline=None)
@given(contents())
def test_a_query_reply_gives_whole_numbers_or_none(content):
    partition, examples = protocol.read_identity(reply_to(_task(), content))
    for value in (partition, examples):
        assert value is None or (type(value) is int and 0 <= value <= 2**53)


@pytest.mark.parametrize("shape", [(10**9,), (10**12,), (2**31, 2**31)])
def test_a_declared_huge_array_is_refused_before_it_is_allocated(shape):
    out = io.BytesIO()
    npy.write_array_header_1_0(out, {"descr": "<f8", "fortran_order": False, "shape": shape})
    out.write(np.zeros(4).tobytes())
    record = ArrayRecord(
        {"w": Array(dtype="float64", shape=shape, stype="numpy.ndarray", data=out.getvalue())}
    )
    with pytest.raises(ValueError, match=r"declares shape .* but carries 32 bytes"):
        protocol.decode_arrays(record)


def test_an_npz_or_a_torch_payload_is_refused():
    zipped = io.BytesIO()
    np.savez(zipped, w=np.zeros(5, np.float32))  # np.load would return a lazy NpzFile
    for stype, data in (("numpy.ndarray", zipped.getvalue()), ("torch", b"\x80\x02")):
        record = ArrayRecord({"w": Array(dtype="float32", shape=(5,), stype=stype, data=data)})
        with pytest.raises(ValueError, match="not a .npy payload|serialisation 'torch'"):
            protocol.decode_arrays(record)


@pytest.mark.parametrize("count", BAD_COUNTS)
def test_a_bad_num_examples_is_refused_naming_it(count):
    content = RecordDict(
        {"arrays": initial_arrays(), "metrics": MetricRecord({"num-examples": count})}
    )
    with pytest.raises(ValueError, match="num-examples must be a whole number in"):
        protocol.read_train_reply(reply_to(_task(), content))


class FuzzNode:
    """Answers every train task with the next of ``replies`` (each a bad reply's content)."""

    def __init__(self, honest, replies) -> None:
        self.honest, self.replies, self.sent = honest, replies, 0

    def __call__(self, message: Message) -> Message | None:
        if message.metadata.message_type != "train":
            return self.honest(message)
        base = message.content.array_records["arrays"].to_numpy_ndarrays()
        content = self.replies[self.sent % len(self.replies)](base)
        self.sent += 1
        return reply_to(message, content)


def _watch_the_model(monkeypatch) -> list[str]:
    """Make every aggregator's ``apply`` check that a rejected update left the model as it
    was, bit for bit; the reasons of the rejections seen."""
    reasons: list[str] = []
    apply = Aggregator.apply

    def checked(self, update):
        before = [p.copy() for p in self.params]
        outcome = apply(self, update)
        if not outcome.accepted:
            reasons.append(outcome.reason)
            for a, b in zip(before, self.params, strict=True):
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), outcome.reason
        return outcome

    monkeypatch.setattr(Aggregator, "apply", checked)
    return reasons


@pytest.mark.parametrize("preset", sorted(PRESETS))
@settings(max_examples=8, deadline=None, suppress_health_check=[FIXTURE])
@given(replies=st.lists(bad_train_replies(), min_size=1, max_size=4))
def test_every_presets_loop_survives_bad_replies_and_counts_each(preset, replies, monkeypatch):
    _watch_the_model(monkeypatch)
    nodes = quadratic_fleet(4, seed=7)
    fuzz_id = next(k for k, n in nodes.items() if n.partition_id == FUZZER)
    fuzzer = FuzzNode(nodes[fuzz_id], replies)
    handlers = {**nodes, fuzz_id: fuzzer}
    strategy = PRESETS[preset](clock=VirtualClock(seed=3), min_nodes=4, seed=1, eval_every=None)
    result = strategy.start(
        FakeGrid(handlers), initial_arrays(), num_rounds=3, timeout=1, train_config=TRAIN
    )
    records = [dict(r) for _, r in sorted(result.train_metrics_clientapp.items())]
    from_fuzzer = [r for r in records if r["stable-id"] == FUZZER]
    assert not any(r["accepted"] for r in from_fuzzer)
    assert all(np.isfinite(a).all() for a in result.arrays.to_numpy_ndarrays())
    refused = len(from_fuzzer) + result.faults.get("malformed", 0)
    assert refused <= fuzzer.sent <= refused + 1  # at most one still in flight at the end
    assert sum(result.rejected.values()) >= len(from_fuzzer)
