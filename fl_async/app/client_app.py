"""The ClientApp that ``flwr run .`` starts: fl-async's train, evaluate and query handlers."""

from flwr.clientapp import ClientApp

from fl_async.clients import client_app as handlers

app = ClientApp()
app.train()(handlers.train)
app.evaluate()(handlers.evaluate)
app.query()(handlers.query)
