# shellcheck shell=bash
# shellcheck disable=SC1083,SC2034 # placeholders components/template.py fills; preflight.sh reads the settings
# The start of the preflight as it runs on a host or in a pod's init container
# (components/render/preflight.py): the stack's settings (components/host/preflight.sh says what each is; every
# value quoted for the shell). preflight-check-weights.sh follows where the weights are checked in
# place, then preflight.sh itself. These comments are not sent.
HOST={{HOST}}
ACCELERATOR={{ACCELERATOR}}
ACCELERATORS={{ACCELERATORS}}
GMU={{GMU}}
CONTEXT_MIB={{CONTEXT_MIB}}
IDLE_HBM_MIB={{IDLE_HBM_MIB}}
PROFILE={{PROFILE}}
CHIP={{CHIP}}
CHIP_CC={{CHIP_CC}}
IMAGE_CUDA={{IMAGE_CUDA}}
DRIVER_MINIMUM={{DRIVER_MINIMUM}}
HOST_DIR={{HOST_DIR}}
NEED_DISK_GIB={{NEED_DISK_GIB}}
MIN_SHM_GIB={{MIN_SHM_GIB}}
CARDS_FROM={{CARDS_FROM}}
