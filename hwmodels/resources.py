"""Where pksim's files other than Python live: the one locator every layer asks.

Everything is found from the installed packages (a wheel, an editable install), never from
the repository layout, so ``pksim run``, ``calibrate``, ``validate`` and ``codegen --build``
work from a wheel with no source tree:

* data shipped inside a package (system files, studies, suites, the published corpus, the
  microbenchmarks, the device scripts, measured data) is ``package_dir(package, *parts)``,
  found from the package's import spec without importing it;
* the CUDA sources and headers of the top-level ``kernels/`` folder ship as the data-only
  package ``pksim_kernels`` (setup.py maps it; docs/design/layout.md, "Packaging"):
  ``kernels_dir()``. ``$PKSIM_KERNELS`` overrides it: the device scripts, which run from an
  uninstalled checkout, set it (validation/device/env.sh).

It lives in the lowest layer so that hwmodels, codegen and validation all use it.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from hwmodels.errors import ConfigError

KERNELS_PACKAGE = "pksim_kernels"
KERNELS_ENV = "PKSIM_KERNELS"
# A file every complete kernels folder holds (a stale or partial copy is not taken).
_KERNELS_MARK = Path("include") / "pk" / "pk.cuh"


def package_dir(package: str, *parts: str) -> Path:
    """The folder of top-level ``package`` (found, not imported) joined with ``parts``."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package {package!r} is not installed (pip install .)")
    return Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)


def import_root() -> Path:
    """The folder the project's packages are imported from (site-packages for a wheel): a
    subprocess that runs ``python -m validation...`` puts it on its PYTHONPATH."""
    return package_dir("validation").parent


def kernels_candidates() -> list[Path]:
    """Where the kernel sources may be, in the order they are looked for."""
    env = os.environ.get(KERNELS_ENV)
    if env:
        return [Path(env)]
    spec = importlib.util.find_spec(KERNELS_PACKAGE)
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def find_kernels_dir() -> Path | None:
    """The kernel sources' folder, or None when this install has none."""
    for cand in kernels_candidates():
        if (cand / _KERNELS_MARK).is_file():
            return cand.resolve()
    return None


def kernels_dir() -> Path:
    """The kernel sources' folder (kernels/ of the repository, pksim_kernels/ of a wheel)."""
    found = find_kernels_dir()
    if found is None:
        tried = ", ".join(str(c) for c in kernels_candidates()) or "none"
        raise ConfigError(f"the CUDA kernel sources are not found (package {KERNELS_PACKAGE}; "
                          f"${KERNELS_ENV}; tried: {tried}): install pksim (pip install .) or "
                          f"set ${KERNELS_ENV} to a checkout's kernels/; `pksim env` says more")
    return found


def kernel_include_dirs() -> tuple[Path, Path]:
    """The -I folders of every kernel build: kernels/include (pk/) and kernels itself."""
    root = kernels_dir()
    return root / "include", root


def microbench_dir() -> Path:
    return package_dir("validation", "microbench")


def device_dir() -> Path:
    return package_dir("validation", "device")


def data_dir() -> Path:
    return package_dir("validation", "data")


def suites_dir() -> Path:
    return package_dir("validation", "suites")


def corpus_dir() -> Path:
    return package_dir("validation", "published", "corpus")


def systems_dir() -> Path:
    return package_dir("hwmodels", "systems")


def profiles_dir() -> Path:
    """The kernel profiles (hwmodels/profiles/*.toml)."""
    return package_dir("hwmodels", "profiles")


def studies_dir() -> Path:
    return package_dir("pksim_core", "studies")
