"""pksim: predict, search and generate multi-GPU kernels on modelled topologies.

The Python API (docs/api.md) is loaded when first used, so that ``import pksim`` stays cheap:
``pksim.predict``, ``pksim.search``, ``pksim.sweep``, ``pksim.whatif``, ``pksim.load_system``
and the one error type, ``pksim.PksimError``."""
from pksim_core.lazy import LazyTable

__version__ = "0.1.0"

API = LazyTable({
    "predict": "pksim.api.predict:predict",
    "search": "pksim.api.predict:search",
    "load_system": "pksim.api.predict:load_system",
    "Predicted": "pksim.api.predict:Predicted",
    "Ranking": "pksim.api.predict:Ranking",
    "Options": "pksim.api.options:Options",
    "sweep": "pksim.api.study:sweep",
    "whatif": "pksim.api.study:whatif",
    "SweepResult": "pksim.api.study:SweepResult",
    "StudyResult": "pksim.api.study:StudyResult",
    "PksimError": "hwmodels.errors:PksimError",
})


def __getattr__(name: str):
    if name in API:
        value = API.load(name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pksim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + API.names())


__all__ = ["__version__", *API.names()]
