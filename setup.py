"""Only what pyproject.toml cannot say: the top-level kernels/ folder (CUDA, no Python) ships
as the data-only package ``pksim_kernels`` beside the Python packages, in a wheel and in an
editable install alike (hwmodels/resources.py finds it; docs/design/layout.md, "Packaging")."""
from setuptools import find_namespace_packages, setup

KERNELS = ["pksim_kernels", *(f"pksim_kernels.{p}" for p in find_namespace_packages(where="kernels"))]
setup(packages=[*find_namespace_packages(include=["pksim*", "hwmodels*", "codegen*", "validation*"]), *KERNELS],
      package_dir={"pksim_kernels": "kernels"})   # its files: [tool.setuptools.package-data]
