# validation/device/env.sh: sourced from the repository root by the scripts of a device call
# (validation/device/session.sh). Installs the simpy wheel carried
# in .whl/ (here: python3 -m pip download --no-deps --only-binary=:all: -d .whl simpy) into
# /tmp/site and sets the environment every device call runs with: the project on PYTHONPATH,
# CUDA modules loaded eagerly (virtual ranks, ARCHITECTURE.md) and NVLink multicast off.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD CUDA_MODULE_LOADING=EAGER NCCL_NVLS_ENABLE=0
