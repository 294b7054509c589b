from __future__ import annotations

import pytest

from hwmodels.errors import ConfigError
from pksim_core.schedule import Schedule


def make(**kw):
    base = dict(op="all-reduce", shape=(("bytes", 1 << 20),), world=8)
    base.update(kw)
    return Schedule(**base)


def test_json_round_trip_is_exact_and_hash_is_stable():
    s = make(algorithm="two-shot", mechanism="register", comm_sms=32, chunk_bytes=4096,
             extra=(("note", "x"),))
    again = Schedule.from_json(s.to_json())
    assert again == s and hash(again) == hash(s)
    assert again.key() == s.key() and len(s.key()) == 12
    assert make(comm_sms=33).key() != s.key()


def test_schedules_are_frozen_and_hashable():
    s = make()
    with pytest.raises(AttributeError):
        s.world = 4  # type: ignore[misc]
    assert len({make(), make(), make(world=4)}) == 2


@pytest.mark.parametrize("field, value, message", [
    ("algorithm", "butterfly", "schedule algorithm = 'butterfly' is not one of"),
    ("mechanism", "pigeon", "schedule mechanism = 'pigeon'"),
    ("world", 0, "schedule world must be at least 1"),
    ("chunk_bytes", -1, "chunk_bytes must be >= 0"),
    ("root", 8, "root 8 is not a rank of world 8"),
])
def test_bad_values_are_config_errors(field, value, message):
    with pytest.raises(ConfigError, match=message):
        make(**{field: value})


def test_unknown_keys_in_json_are_refused():
    data = make().to_dict()
    data["colour"] = "blue"
    with pytest.raises(ConfigError, match="unknown keys \\['colour'\\]"):
        Schedule.from_dict(data)
