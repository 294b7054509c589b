"""The calibration inputs: exactly the microbenchmark results each shipped calibrated system
(hwmodels/systems/h200-calibrated.toml, inherited by h200-virtual-calibrated; h100-calibrated)
was fitted from, in validation/data/calibration/ with ``MANIFEST.toml`` (``MANIFEST-h100.toml``): per file, in the order of the fit
(a later file's points replace an earlier one's repeats), its GPU, date, the command that
measured it and its sha256. The tests check every file against its digest and refit from
the manifest; ``locate`` finds a result file that a calibrated file or a command line still
names by its old path (validation/data/NAME)."""
from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from hwmodels.errors import ConfigError
from hwmodels.resources import data_dir, import_root

DATA_DIR = data_dir()
CALIBRATION_DIR = DATA_DIR / "calibration"
MANIFEST = CALIBRATION_DIR / "MANIFEST.toml"
# each calibrated system with its manifest: the H200's (h200-calibrated) and the H100's
# (h100-calibrated, MANIFEST-h100.toml)
MANIFESTS = {"h200-calibrated": MANIFEST, "h100-calibrated": CALIBRATION_DIR / "MANIFEST-h100.toml"}
ROOT = import_root()                # where a path such as validation/data/NAME resolves


@dataclass(frozen=True)
class Input:
    """One calibration input as the manifest lists it."""
    file: str               # name in validation/data/calibration/
    gpu: str
    date: str
    command: str
    sha256: str

    @property
    def path(self) -> Path:
        return CALIBRATION_DIR / self.file


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def inputs(manifest: Path = MANIFEST) -> list[Input]:
    """The manifest's files, in the order of the fit."""
    try:
        data = tomllib.loads(manifest.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{manifest}: cannot read the calibration manifest ({exc})") from None
    try:
        return [Input(**entry) for entry in data["input"]]
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{manifest}: every [[input]] needs file, gpu, date, command, "
                          f"sha256 ({exc})") from None


def locate(path: str | Path) -> Path:
    """``path`` where it exists (as given, or from the repository root), else the one result
    file of that name under validation/data (moved there from validation/data/NAME)."""
    p = Path(path)
    for candidate in (p, ROOT / p):
        if candidate.exists():
            return candidate
    found = sorted(DATA_DIR.rglob(p.name))
    return found[0] if len(found) == 1 else p
