"""The ClientApp that ``flwr run .`` starts: fl-async's train, evaluate and query handlers.

The handlers (and torch under them) are imported on a node's first message, not with this
module: Flower's simulation loads the ClientApp once to check it before it starts Ray, so a
light module lets Ray's start overlap the ServerApp's own imports instead of waiting for torch.
"""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the received model on this node's data (``fl_async.clients.client_app.train``)."""
    from fl_async.clients import client_app as handlers

    return handlers.train(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received model here (``fl_async.clients.client_app.evaluate``)."""
    from fl_async.clients import client_app as handlers

    return handlers.evaluate(msg, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Answer the identify query (``fl_async.clients.client_app.query``)."""
    from fl_async.clients import client_app as handlers

    return handlers.query(msg, context)
