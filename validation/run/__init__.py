"""The GPU runners (python -m validation.run.collectives | fused | gemm) and their supervisor."""
