#!/bin/bash
# vLLM 0.25.0's prefix cache on the GPU host, for prefix_cache.py (scripts/h200/README.md for the
# payload). Three device calls, one right after the other:
#   bash scripts/h200/rehearse.sh stage              # carry .h200/part1 (vLLM's kernel library)
#   bash scripts/h200/rehearse.sh stage              # carry .h200/part3 (FlashAttention 3's)
#   bash .h200/pc/prefix_cache.sh                    # carry .h200/part2, .h200/serve.json and .h200/pc
# This file and prefix_cache.py travel as copies in .h200/pc/ (the device gets a checkout, maybe not
# this worktree).
set -u
OUT=${OUT:-/tmp/h200-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
SITE=/tmp/site STAGE=/tmp/h200-stage
t0=$(date +%s)
for so in _C_stable_libtorch.abi3.so _vllm_fa3_C.abi3.so; do
  [ -f $STAGE/$so ] || { echo "no staged $so: the host went back between the calls"; exit 3; }
done
if [ ! -d $SITE/vllm ]; then
  mkdir -p $SITE
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .h200/part2/site.tar.xz $SITE
  cp $STAGE/_C_stable_libtorch.abi3.so $SITE/vllm/
  cp $STAGE/_vllm_fa3_C.abi3.so $SITE/vllm/vllm_flash_attn/
fi
rm -rf /tmp/model; cp -r .h200/part2/model /tmp/model
echo "install $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
set -o pipefail
timeout 480 python3 "$HERE/prefix_cache.py" run --engine vllm --spec .h200/serve.json "$OUT" 2>&1 | tee "$OUT/run.log" | tail -c 6000
echo "rc $? total $(( $(date +%s) - t0 )) s"
