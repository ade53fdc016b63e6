#!/bin/bash
# The real vLLM 0.25.0 on the GPU host under the project's own code (scripts/h200/README.md).
#   bash scripts/h200/rehearse.sh stage   # 1st call: carry .h200/part1 (vLLM's kernel library)
#   bash scripts/h200/rehearse.sh stage   # 2nd call, at once: carry .h200/part3 (FlashAttention 3's)
#   bash scripts/h200/rehearse.sh         # 3rd call, at once: carry .h200/part2 and .h200/serve.json
# The host keeps /tmp only while it stays warm (about 30 s after a call): the second call must follow.
set -u
OUT=${OUT:-/tmp/h200-out}; mkdir -p "$OUT"
SITE=/tmp/site STAGE=/tmp/h200-stage
t0=$(date +%s)
if [ "${1:-}" = "stage" ]; then
  # Whichever kernel library this call carried: vLLM's own (part1), FlashAttention 3's (part3).
  mkdir -p $STAGE
  if [ -f .h200/part1/C_stable_libtorch.so.xz ] && [ ! -f $STAGE/_C_stable_libtorch.abi3.so ]; then
    python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
      .h200/part1/C_stable_libtorch.so.xz $STAGE/_C_stable_libtorch.abi3.so
  fi
  if [ -f .h200/part3/vllm_fa3_C.so.gz ] && [ ! -f $STAGE/_vllm_fa3_C.abi3.so ]; then
    python3 -c "import gzip,shutil,sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
      .h200/part3/vllm_fa3_C.so.gz $STAGE/_vllm_fa3_C.abi3.so
  fi
  ls -la $STAGE; sha256sum $STAGE/*.so
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name(0))"
  echo "staged in $(( $(date +%s) - t0 )) s"; exit 0
fi
for so in _C_stable_libtorch.abi3.so _vllm_fa3_C.abi3.so; do
  [ -f $STAGE/$so ] || { echo "no staged $so: the host went back between the calls"; exit 3; }
done
if [ ! -d $SITE/vllm ]; then
  mkdir -p $SITE
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .h200/part2/site.tar.xz $SITE
  cp $STAGE/_C_stable_libtorch.abi3.so $SITE/vllm/
  # vllm.vllm_flash_attn refuses to import without FA2 or FA3; the model registry imports it for
  # any model. FA3 (Hopper) is the one that fits a call (FA2's is 181 MiB).
  cp $STAGE/_vllm_fa3_C.abi3.so $SITE/vllm/vllm_flash_attn/
fi
rm -rf /tmp/model; cp -r .h200/part2/model /tmp/model
echo "install $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$SITE:.
python3 -c "import vllm; print('vllm', vllm.__version__)" 2>&1 | tail -3
timeout 470 python3 scripts/h200/rehearse.py .h200/serve.json "$OUT" 2>&1 | tail -c 9000
echo "total $(( $(date +%s) - t0 )) s"
