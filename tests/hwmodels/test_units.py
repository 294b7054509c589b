from __future__ import annotations

import pytest

from hwmodels.errors import ConfigError
from hwmodels.units import format_bytes, parse_bytes, parse_bytes_range


@pytest.mark.parametrize("text, value", [("4096", 4096), ("4KiB", 4096), ("1.5KiB", 1536),
                                         ("2MB", 2_000_000), ("1GiB", 1 << 30), ("8 gib", 8 << 30)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["-5", "0", "abc", "1.3B", "5 parsecs"])
def test_parse_bytes_rejects(text):
    with pytest.raises(ConfigError, match="--bytes"):
        parse_bytes(text)


def test_ranges_are_powers_of_two():
    assert parse_bytes_range("1KiB:8KiB") == [1024, 2048, 4096, 8192]
    assert parse_bytes_range("1KiB,3KiB") == [1024, 3072]
    with pytest.raises(ConfigError, match="ends below its start"):
        parse_bytes_range("8KiB:1KiB")
    assert format_bytes(1536) == "1.5KiB" and format_bytes(1 << 30) == "1GiB"
