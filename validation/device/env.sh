# validation/device/env.sh: sourced from the repository root by the scripts of a device call
# (validation/device/session.sh). Installs the simpy wheel carried
# in .whl/ (or ../../.whl/ from a copy in .dev/NAME; here: python3 -m pip download --no-deps --only-binary=:all: -d .whl simpy) into
# /tmp/site (PK_SITE) and sets the environment every device call runs with: the project on PYTHONPATH,
# its kernel sources in PKSIM_KERNELS (the checkout is not installed, so hwmodels.resources
# cannot find them as the package pksim_kernels), CUDA modules loaded eagerly (virtual ranks,
# ARCHITECTURE.md) and NVLink multicast off.
# The wheel folder: .whl here, or the checkout's two levels up (a copy run from .dev/NAME)
whl=.whl; [ -d "$whl" ] || whl=../../.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "${PK_SITE:-/tmp/site}" "$whl"/*.whl
export PYTHONPATH=${PK_SITE:-/tmp/site}:$PWD PKSIM_KERNELS=$PWD/kernels CUDA_MODULE_LOADING=EAGER NCCL_NVLS_ENABLE=0
