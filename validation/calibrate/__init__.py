"""Calibration: the fit, the calibrated file, its report, the microbenchmarks and their manifest."""
