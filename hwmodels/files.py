"""The one reader of pksim's TOML files: system files and kernel profiles (hwmodels.catalog,
hwmodels.profile), and the studies, programs and validation suites that read the same way.
Whatever is wrong with the file (missing, a folder, unreadable, not UTF-8 text, not valid
TOML) is a one-line ConfigError naming the file and what it was meant to be."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from hwmodels.errors import ConfigError


def read_toml(path: str | Path, what: str = "file", **loads: Any) -> dict[str, Any]:
    """The table of the TOML file at ``path``; ``what`` names the kind of file in errors
    ("system file", "study file", ...); ``loads``: tomllib.loads keywords (parse_float)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder, not a .toml file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a TOML text file (byte {exc.start} is not UTF-8)"
                          ) from None
    try:
        return tomllib.loads(text, **loads)
    except tomllib.TOMLDecodeError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{path}: not valid TOML ({detail})") from None


def read_toml_text(text: str, where: str, **loads: Any) -> dict[str, Any]:
    """``text`` read as TOML (a value given on the command line, a file already read);
    ``where`` names it in the one-line error."""
    try:
        return tomllib.loads(text, **loads)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({' '.join(str(exc).split())})") from None
