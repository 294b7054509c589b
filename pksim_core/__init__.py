"""The model (layer 1: docs/design/layout.md): workloads, schedules, the DES, search,
programs, reports. The Python API is ``pksim``."""
