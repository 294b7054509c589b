"""Preparing a validation bundle: emit, build and predict its cases (where nvcc and the simulator are)."""
