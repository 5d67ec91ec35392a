"""Test-wide settings: nothing is downloaded, Flower stays quiet, Ray sees no accelerator."""

import os

for _key, _value in {
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "MPLBACKEND": "Agg",
}.items():
    os.environ.setdefault(_key, _value)
