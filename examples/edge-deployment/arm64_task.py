"""One ClientApp train task, as a SuperNode would run it, timed: run by arm64_check.sh.

It imports fl-async's ClientApp (the import time is what each task's fresh ClientApp process
pays), builds the model the ServerApp would send, and calls the ClientApp on a train message for
partition 0 of 20 of the embedded MNIST with the run config's defaults (2 local epochs, batch
32). Building a ``Message`` outside a running Flower app needs Flower's task identity, an
internal API, set here as the repository's test helper does.
"""

import json
import platform
import time

started = time.perf_counter()
from fl_async.app.client_app import app  # noqa: E402

import_s = time.perf_counter() - started

import torch  # noqa: E402
from flwr.app import ConfigRecord, Context, Message, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fl_async.clients.node_data import cached_dataset, new_model  # noqa: E402
from fl_async.config import DEFAULTS  # noqa: E402
from fl_async.data_spec import DataSpec  # noqa: E402
from fl_async.protocol import to_record  # noqa: E402

TaskIdentity.run_id = 1
TaskIdentity.node_id = 100
TaskIdentity.task_id = 1

run_config = dict(DEFAULTS)
spec = DataSpec.from_config(run_config)
model = new_model(spec, cached_dataset(spec.dataset, spec.root), seed=0)
state = model.state_dict()
arrays = to_record(list(state), [t.numpy() for t in state.values()])
config = ConfigRecord({"server-step": 0, "task-seed": 1})
message = Message(
    RecordDict({"arrays": arrays, "config": config}), dst_node_id=100, message_type="train"
)
context = Context(
    run_id=1,
    node_id=100,
    node_config={"partition-id": 0, "num-partitions": int(run_config["num-nodes"])},
    state=RecordDict(),
    run_config=run_config,
)
started = time.perf_counter()
reply = app(message, context)
task_s = time.perf_counter() - started
metrics = dict(reply.content.metric_records["metrics"])
print(
    json.dumps(
        {
            "machine": platform.machine(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.cuda.is_available(),
            "import_client_app_s": round(import_s, 1),
            "train_task_s": round(task_s, 1),
            "reply_metrics": metrics,
        },
        indent=1,
    )
)
assert reply.content.array_records["arrays"].keys() == arrays.keys()
