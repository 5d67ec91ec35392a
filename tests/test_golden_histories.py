"""Every preset's seeded history equals the one recorded before the runtime was rebuilt."""

import json

import pytest
from golden import GOLDEN, SCENARIOS, record

from fl_async.strategies import PRESETS

EXPECTED = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_history_is_reproduced_bit_for_bit(preset, scenario):
    # JSON keeps every float exactly (Python writes the shortest repr that round-trips).
    assert record(preset, scenario) == EXPECTED[f"{preset}/{scenario}"]
