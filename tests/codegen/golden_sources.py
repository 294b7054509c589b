"""The golden-source check the codegen tests share: a rendered source must equal its file
under tests/codegen/golden; PKSIM_UPDATE_GOLDEN=1 rewrites the file (review the diff)."""
from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.cu"
    if os.environ.get("PKSIM_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}: run with PKSIM_UPDATE_GOLDEN=1"
    assert text == path.read_text(), (f"rendered source differs from {path.name}; if intended, "
                                      f"regenerate with PKSIM_UPDATE_GOLDEN=1 and review the diff")
