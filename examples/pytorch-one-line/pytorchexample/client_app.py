"""An unchanged Flower ClientApp: it returns trained weights and num-examples, as for FedAvg."""

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from pytorchexample.task import Net, load_data, test, train

app = ClientApp()


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)  # many virtual nodes share a few cores
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    trainloader, _ = load_data(
        int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    )
    epochs = int(context.run_config.get("local-epochs", 1))
    loss = train(model, trainloader, epochs, float(msg.content["config"]["lr"]))
    metrics = MetricRecord({"train-loss": loss, "num-examples": len(trainloader.dataset)})
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate_fn(msg: Message, context: Context) -> Message:
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, testloader = load_data(0, 1)
    loss, accuracy = test(model, testloader)
    metrics = {"eval-loss": loss, "eval-acc": accuracy, "num-examples": len(testloader.dataset)}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
