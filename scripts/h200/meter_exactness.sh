#!/bin/bash
# The usage meter's per-key counts against the real vLLM 0.25.0 on the GPU host (scripts/h200/README.md
# for the payload; meter_exactness.py for what is measured). Three device calls, one right after the other:
#   bash scripts/h200/rehearse.sh stage                   # carry .h200/part1 (vLLM's kernel library)
#   bash scripts/h200/rehearse.sh stage && bash .h200/part2/meter_exactness.sh check
#                                                         # carry .h200/part3 and the front's files of part2
#   bash .h200/part2/meter_exactness.sh                   # carry .h200/part2 and .h200/serve.json
# This file and meter_exactness.py travel as copies in .h200/part2/ (the device gets the session's
# checkout, not a worktree); the front's config and nginx folder are made here (see meter_exactness.py).
set -u
OUT=${OUT:-/tmp/h200-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
SITE=/tmp/site STAGE=/tmp/h200-stage
NGINX=$HERE/nginx
t0=$(date +%s)
if [ "${1:-}" = "check" ]; then
  head -2 /etc/os-release; ldd --version | head -1
  LD_LIBRARY_PATH=$NGINX/usr/lib/x86_64-linux-gnu:$NGINX/lib/x86_64-linux-gnu \
    ldd $NGINX/usr/sbin/nginx $NGINX/usr/lib/nginx/modules/ngx_http_lua_module.so
  python3 "$HERE/meter_exactness.py" check --conf "$HERE/front.conf" --nginx-root "$NGINX" "$OUT/check"
  cp "$OUT/check/front.log" "$OUT/check-front.log" 2>/dev/null; rm -rf "$OUT/check"
  exit 0
fi
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
timeout 480 python3 "$HERE/meter_exactness.py" run --engine vllm --spec .h200/serve.json \
  --conf "$HERE/front.conf" --nginx-root "$NGINX" "$OUT" 2>&1 | tee "$OUT/run.log" | tail -c 9000
echo "rc $? total $(( $(date +%s) - t0 )) s"
