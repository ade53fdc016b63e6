#!/bin/bash
# Prefix affinity against round-robin before two real vLLM 0.25.0 engines on the GPU host
# (prefix_affinity.py says what is measured; scripts/h200/README.md the payload). Three device
# calls, one right after the other:
#   bash scripts/h200/rehearse.sh stage          # carry .h200/part1 (vLLM's kernel library)
#   bash scripts/h200/rehearse.sh stage          # carry .h200/part3 (FlashAttention 3's)
#   bash .h200/part2/prefix_affinity.sh          # carry .h200/part2 and .h200/serve.json
# This file and prefix_affinity.py travel as copies in .h200/part2/, beside the front's two configs
# (prefix_affinity.py render) and Debian's nginx folder.
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
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$HERE/site.tar.xz" $SITE
  cp $STAGE/_C_stable_libtorch.abi3.so $SITE/vllm/
  cp $STAGE/_vllm_fa3_C.abi3.so $SITE/vllm/vllm_flash_attn/
fi
rm -rf /tmp/model; cp -r "$HERE/model" /tmp/model
echo "install $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
set -o pipefail
timeout 540 python3 "$HERE/prefix_affinity.py" run --engine vllm --spec .h200/serve.json \
  --confs "$HERE" --nginx-root "$HERE/nginx" "$OUT" 2>&1 | tee "$OUT/run.log" | tail -c 9000
echo "rc $? total $(( $(date +%s) - t0 )) s"
for f in "$OUT"/engine-*/serve.log; do gzip -f "$f"; done
