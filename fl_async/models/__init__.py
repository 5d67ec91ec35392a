"""Models for the image datasets and for feature vectors, and their weights as numpy arrays."""

from fl_async.models.cnn import CNN, CNN32
from fl_async.models.logreg import LogReg
from fl_async.models.registry import MODEL_NAMES, build_model
from fl_async.models.resnet import ResNet8
from fl_async.models.weights import get_weights, set_weights

__all__ = [
    "CNN",
    "CNN32",
    "MODEL_NAMES",
    "LogReg",
    "ResNet8",
    "build_model",
    "get_weights",
    "set_weights",
]
