"""pksim validation: the GPU runtime, the runners, case preparation, calibration and reports
(validation/README.md gives the layout)."""
