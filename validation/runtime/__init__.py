"""The GPU runtime: ctypes libraries, per-rank buffers, the one CUDA-event timer, torch references."""
