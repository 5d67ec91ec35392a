"""The ServerApp of Flower's PyTorch quickstart, with FedAvg swapped for GSGM."""

import json
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

from fl_async.strategies import GSGM  # was: from flwr.serverapp.strategy import FedAvg
from pytorchexample.task import Net, central_evaluate

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    num_rounds = int(context.run_config.get("num-server-rounds", 3))
    lr = float(context.run_config.get("lr", 0.1))
    min_nodes = int(context.run_config.get("min-nodes", 2))
    arrays = ArrayRecord(Net().state_dict())

    strategy = GSGM(min_nodes=min_nodes)  # was: strategy = FedAvg(min_available_nodes=min_nodes)

    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=central_evaluate,
    )
    final = result.evaluate_metrics_serverapp[max(result.evaluate_metrics_serverapp)]
    summary = {"accuracy": final["accuracy"], "updates": result.num_updates}
    Path(str(context.run_config.get("summary", "summary.json"))).write_text(json.dumps(summary))
