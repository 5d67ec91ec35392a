"""A standard Flower PyTorch app (quickstart style) that runs on fl-async's GSGM."""
