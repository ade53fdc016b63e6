# shellcheck shell=bash
# The preflight, run with bash on the target host before anything is created there.
# components/render/preflight.py sends it with these settings assigned above it:
#   HOST              the host it runs on, as messages name it (glm:target.hosts[NAME] (user@address:port),
#                     or on Kubernetes glm:target.kubernetes node NODE)
#   ACCELERATOR       nvidia | ascend | none (the profile's kind)
#   ACCELERATORS      the indices of glm:container.accelerators, space-separated
#   GMU               glm:serving.gpuMemoryUtilization
#   CONTEXT_MIB       MiB a vLLM worker's own CUDA context takes before it measures free memory
#   IDLE_HBM_MIB      MiB npu-smi shows in use on an idle NPU (the driver's own)
#   PROFILE           glm:hardware
#   CHIP, CHIP_CC     the card the profile is for (part of its name; compute capability or empty)
#   IMAGE_CUDA, DRIVER_MINIMUM   the image's CUDA and the oldest driver that runs it (or empty)
#   HOST_DIR, NEED_DISK_GIB, MIN_SHM_GIB
#   CARDS_FROM        docker (a host: Docker must hand the GPUs over) | device-plugin (a pod's
#                     init container, components/kubernetes/workload.py: the plugin already did)
# and, where the weights are checked, a function check_weights (components/host/weights_check.py).
# It reports every problem at once, one line each on stderr naming the host, the config key and the
# fix, and exits 1 if any.
set -u
problems=''
problem() { problems="${problems}preflight on $HOST: $*"$'\n'; }
# What the box reports (process and GPU names, tools' errors, file names) can hold any byte, e.g. a
# terminal escape a local user put in a process name: only printable ASCII (bytes 0x20-0x7e in the
# C locale, here and in the awk programs' shown_as) reaches the operator, the rest shows as "?".
printable() { LC_ALL=C tr -c '\n -~' '?'; }
say() { printf '%s\n' "$*" | printable; }

# One "ok …" or "problem …" line per finding, from --query-gpu rows on stdin; ENVIRON["APPS"]: the
# --query-compute-apps output in its default csv form (header, "MiB" units). It comes through the
# environment, not -v (which turns a name's `\n` into a newline), and a process's record is read
# from its end, ", <memory>, <GPU UUID>" closing a line: a name may hold ", " and newlines.
read -r -d '' NVIDIA_SMI_AWK <<'AWK'
function older(a, b,   x, y, i, n) {
  n = split(a, x, "."); split(b, y, ".")
  for (i = 1; i <= n || i in y; i++) if (x[i] + 0 != y[i] + 0) return x[i] + 0 < y[i] + 0
  return 0
}
function shown_as(s) { gsub(/[^ -~]/, "?", s); return s }
BEGIN {
  n = split(ENVIRON["APPS"], lines, "\n"); rec = ""
  for (i = 2; i <= n; i++) {
    rec = rec (rec == "" ? "" : "\n") lines[i]
    if (!match(rec, /, [^,\n]*, GPU-[0-9A-Fa-f-]+$/)) continue
    tail = substr(rec, RSTART + 2); head = substr(rec, 1, RSTART - 1); rec = ""
    g = substr(tail, index(tail, ", GPU-") + 2); mem = substr(tail, 1, index(tail, ", GPU-") - 1)
    p = index(head, ", "); pid = p ? substr(head, 1, p - 1) : head; name = p ? substr(head, p + 2) : ""
    held[g] = held[g] (held[g] == "" ? "" : ", ") "pid " shown_as(pid) " " shown_as(name) " " shown_as(mem)
  }
}
{ idx[$1] = 1; gname[$1] = shown_as($2); uuid[$1] = $3; driver = shown_as($5); total[$1] = $6; free[$1] = $8; ccap[$1] = shown_as($9); shown = shown (shown == "" ? "" : ",") shown_as($1) }
END {
  k = split(want, listed, " ")
  for (i = 1; i <= k; i++) {
    g = listed[i]
    if (!(g in idx)) { missing = missing (missing == "" ? "" : ",") g; continue }
    if (chip != "" && (index(gname[g], chip) == 0 || (cc != "" && ccap[g] != cc)))
      { model = gname[g] " (compute capability " ccap[g] ")"; if (!(model in wrong)) models[++nm] = model
        wrong[model] = wrong[model] (wrong[model] == "" ? "" : ",") g }
    need = int(gmu * total[g] + ctx + 0.999)
    if (free[g] + 0 < need) {
      fits = int((free[g] - ctx) * 100 / total[g]) / 100
      print "problem GPU " g " (" gname[g] ") has " free[g] " MiB free; glm:serving.gpuMemoryUtilization " gmu \
        " x " total[g] " MiB + " ctx " MiB for vLLM's CUDA context needs " need " MiB; held by " \
        (held[uuid[g]] == "" ? "no listed process (another container or MIG?)" : held[uuid[g]]) \
        ". Fix: stop those processes, list free GPUs in glm:container.accelerators, or lower " \
        "glm:serving.gpuMemoryUtilization to " (fits > 0 ? fits : 0) " or less"
    } else ok = ok " " g ":" free[g] "/" need
  }
  if (missing != "" && from == "device-plugin")
    print "problem the pod was given " NR " GPU(s), indices " shown ", fewer than the " k " nvidia.com/gpu it " \
      "requests (as many as glm:container.accelerators lists): vLLM would start on fewer cards. " \
      "Fix: check the node's device plugin (kubectl describe node: nvidia.com/gpu allocatable)"
  else if (missing != "")
    print "problem glm:container.accelerators lists GPU " missing " but nvidia-smi shows " NR " GPU(s), indices " \
      shown " (CUDA_VISIBLE_DEVICES drops unknown indices silently: vLLM would start on fewer cards or none). " \
      "Fix: list only indices nvidia-smi -L shows"
  for (i = 1; i <= nm; i++) found = found (i > 1 ? "; " : "") "GPU " wrong[models[i]] ": " models[i]
  if (nm > 0)
    print "problem " found "; glm:hardware " profile " is for " chip (cc == "" ? "" : " (compute capability " cc ")") \
      " and its image is built for it. Fix: set glm:hardware to this box's profile, or deploy to " chip \
      " hosts (glm:target.hosts)"
  if (dmin != "" && older(driver, dmin))
    print "problem driver " driver " is older than " dmin ", the oldest that runs the image's CUDA " cuda \
      " (glm:hardware " profile "). Fix: upgrade the NVIDIA driver to " dmin " or newer"
  print "ok " NR " GPU(s), driver " driver ", free/needed MiB of listed GPUs:" ok
}
AWK

# npu-smi info: per NPU a row "| id  name | health | power temp hugepages |", then per chip
# "| chip | bus-id | aicore  mem used / total  hbm used / total |"; then the process table
# "| npu  chip | pid | name | MB |" (one more column).
read -r -d '' NPU_SMI_AWK <<'AWK'
function shown_as(s) { gsub(/[^ -~]/, "?", s); return s }
NF == 5 && $3 !~ /[0-9A-Fa-f]+:[0-9A-Fa-f]+:/ && split($2, h, " ") >= 2 && h[1] ~ /^[0-9]+$/ {
  npu = h[1]; npus++; name[npu] = shown_as(h[2]); health[npu] = shown_as($3); gsub(/ /, "", health[npu]); next
}
NF == 5 && $3 ~ /[0-9A-Fa-f]+:[0-9A-Fa-f]+:/ && npu != "" && !(npu in total) {
  s = $4; sub(/ +$/, "", s); match(s, /[0-9]+ *\/ *[0-9]+$/); split(substr(s, RSTART), u, "/")
  used[npu] = u[1] + 0; total[npu] = u[2] + 0; next
}
NF == 6 && split($2, p, " ") == 2 && p[1] ~ /^[0-9]+$/ {
  mb = shown_as($5); gsub(/ /, "", mb); pid = shown_as($3); gsub(/ /, "", pid); pname = shown_as($4); gsub(/^ +| +$/, "", pname)
  held[p[1]] = held[p[1]] (held[p[1]] == "" ? "" : ", ") "pid " pid (pname == "" ? "" : " " pname) " " mb " MB"
}
END {
  k = split(want, listed, " ")
  for (i = 1; i <= k; i++) {
    n = listed[i]
    if (!(n in name)) { absent = absent (absent == "" ? "" : ",") n; continue }
    if (index(name[n], chip) == 0) {
      if (!(name[n] in wrong)) models[++nm] = name[n]
      wrong[name[n]] = wrong[name[n]] (wrong[name[n]] == "" ? "" : ",") n
    }
    if (health[n] != "OK") print "problem NPU " n " health is " health[n] " in npu-smi info. Fix: repair or replace it, or leave it out of glm:container.accelerators"
    need = int(gmu * total[n] + 0.999)
    if (total[n] - used[n] + idle < need)
      print "problem NPU " n " (" name[n] ") has " used[n] " of " total[n] " MB HBM in use (" idle " MB when idle); " \
        "glm:serving.gpuMemoryUtilization " gmu " needs " need " MB; held by " (held[n] == "" ? "no listed process" : held[n]) \
        ". Fix: stop those processes, list free NPUs in glm:container.accelerators, or lower glm:serving.gpuMemoryUtilization"
    else ok = ok " " n ":" used[n] "/" total[n]
  }
  if (absent != "") print "problem glm:container.accelerators lists NPU " absent " but npu-smi info does not show it. Fix: list only NPUs npu-smi info shows"
  for (i = 1; i <= nm; i++) found = found (i > 1 ? "; " : "") "NPU " wrong[models[i]] ": " models[i]
  if (nm > 0) print "problem " found "; glm:hardware " profile " is for " chip ". Fix: set glm:hardware to this box's profile, or deploy to " chip " hosts (glm:target.hosts)"
  print "ok " npus " NPU(s), HBM in use/total MB of listed NPUs:" ok
}
AWK

check_nvidia() {
  if ! command -v nvidia-smi >/dev/null; then
    if [ "$CARDS_FROM" = docker ]; then
      problem "nvidia-smi not found on the host (glm:hardware $PROFILE needs NVIDIA GPUs). Fix: install the NVIDIA driver and container toolkit"
    else  # the toolkit mounts nvidia-smi into a container only with the cards it was given
      problem "nvidia-smi not found in the pod: it was given no NVIDIA GPU (glm:hardware $PROFILE needs them; the pod requests nvidia.com/gpu). Fix: run the NVIDIA device plugin and container toolkit on the node (kubectl describe node: nvidia.com/gpu allocatable)"
    fi
    return
  fi
  local gpus apps verdict
  if ! gpus=$(nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,memory.used,memory.free,compute_cap --format=csv,noheader,nounits 2>&1); then
    problem "nvidia-smi --query-gpu failed: $(printf %s "$gpus" | head -c 300). Fix: repair the NVIDIA driver (nvidia-smi must answer)"
    return
  fi
  apps=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv 2>/dev/null) || apps=''
  verdict=$(printf '%s\n' "$gpus" | APPS="$apps" LC_ALL=C awk -F', ' -v want="$ACCELERATORS" -v gmu="$GMU" -v ctx="$CONTEXT_MIB" \
    -v chip="$CHIP" -v cc="$CHIP_CC" -v profile="$PROFILE" -v cuda="$IMAGE_CUDA" -v dmin="$DRIVER_MINIMUM" \
    -v from="$CARDS_FROM" "$NVIDIA_SMI_AWK")
  while IFS= read -r line; do
    case "$line" in
      problem\ *) problem "${line#problem }" ;;
      ok\ *) say "preflight: ${line#ok }" ;;
    esac
  done <<<"$verdict"
  if [ "$CARDS_FROM" = docker ]; then check_container_runtime; else say "preflight: GPUs from the device plugin"; fi
}

# Docker's --gpus needs NVIDIA's runtime hook (or runtime), or a CDI spec for nvidia.com/gpu.
check_container_runtime() {
  local runtimes spec
  runtimes=$(docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}' 2>/dev/null) || runtimes=''
  case " $runtimes " in *" nvidia "*)
    say "preflight: NVIDIA container runtime: docker runtime nvidia"; return ;;
  esac
  if command -v nvidia-container-runtime-hook >/dev/null; then
    say "preflight: NVIDIA container runtime: $(command -v nvidia-container-runtime-hook)"; return
  fi
  spec=$(grep -ls 'nvidia.com/gpu' /etc/cdi/* /var/run/cdi/* 2>/dev/null | head -n1)
  if [ -n "$spec" ]; then say "preflight: NVIDIA container runtime: CDI spec $spec"; return; fi
  problem "no NVIDIA container runtime: docker info lists runtimes '${runtimes% }', no nvidia-container-runtime-hook on PATH, no CDI spec for nvidia.com/gpu in /etc/cdi or /var/run/cdi; the serving container's GPU request would fail (glm:hardware $PROFILE). Fix: install nvidia-container-toolkit, then 'sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker'"
}

check_ascend() {
  if ! command -v npu-smi >/dev/null; then
    problem "npu-smi not found on the host (glm:hardware $PROFILE needs Ascend NPUs). Fix: install the Ascend driver (/usr/local/sbin/npu-smi)"
    return
  fi
  local info verdict missing='' i
  # No fixed file in /tmp: another user's copy there made this fail (stand-in host).
  if ! info=$(npu-smi info 2>&1); then
    problem "npu-smi info failed: $(printf %s "$info" | head -c 300). Fix: repair the Ascend driver (npu-smi info must answer)"
    return
  fi
  for i in $ACCELERATORS; do [ -e "/dev/davinci$i" ] || missing="$missing${missing:+,}$i"; done
  [ -z "$missing" ] || problem "glm:container.accelerators lists NPU $missing but /dev/davinci$missing does not exist ($(ls /dev/davinci[0-9]* 2>/dev/null | wc -l) /dev/davinciN on the host). Fix: list only NPUs the host has"
  verdict=$(printf '%s\n' "$info" | LC_ALL=C awk -F'|' -v want="$ACCELERATORS" -v gmu="$GMU" -v idle="$IDLE_HBM_MIB" \
    -v chip="$CHIP" -v profile="$PROFILE" "$NPU_SMI_AWK")
  while IFS= read -r line; do
    case "$line" in
      problem\ *) problem "${line#problem }" ;;
      ok\ *) say "preflight: ${line#ok }" ;;
    esac
  done <<<"$verdict"
}

check_host() {
  local probe="$HOST_DIR" free_kib need_kib shm_kib need_shm_kib
  while [ ! -d "$probe" ]; do probe=$(dirname "$probe"); done
  free_kib=$(df -Pk "$probe" | awk 'NR==2 {print $4}')
  need_kib=$(awk -v g="$NEED_DISK_GIB" 'BEGIN {printf "%d", g * 1048576}')
  [ "$free_kib" -ge "$need_kib" ] || problem "only $((free_kib / 1048576)) GiB free under $probe, the weights need $NEED_DISK_GIB GiB (glm:model.weightsGib / glm:preflight.minFreeDiskGib). Fix: free disk space or point glm:model.hostDir at a larger disk"
  shm_kib=$(df -Pk /dev/shm | awk 'NR==2 {print $2}')
  need_shm_kib=$(awk -v g="$MIN_SHM_GIB" 'BEGIN {printf "%d", g * 1048576}')
  local shm_where='on the host' shm_fix='enlarge /dev/shm on the host'
  # In a pod /dev/shm is the pod's own: a memory emptyDir of glm:container.shmSize.
  [ "$CARDS_FROM" = docker ] || { shm_where='in the pod'; shm_fix="set glm:container.shmSize to ${MIN_SHM_GIB}g or more"; }
  [ "$shm_kib" -ge "$need_shm_kib" ] || problem "/dev/shm $shm_where is $((shm_kib / 1024)) MiB, glm:preflight.minShmGib asks for $MIN_SHM_GIB GiB. Fix: $shm_fix"
  say "preflight: $((free_kib / 1048576)) GiB free under $probe, /dev/shm $((shm_kib / 1024)) MiB"
}

case "$ACCELERATOR" in
  nvidia) check_nvidia ;;
  ascend) check_ascend ;;
esac
check_host
# The weights check, when the preflight carries one (a weights folder that is not downloaded later).
if declare -F check_weights >/dev/null && ! weights=$(check_weights 2>&1); then
  while IFS= read -r line; do problem "$line"; done <<<"$weights"
elif [ -n "${weights:-}" ]; then
  say "$weights"
fi
if [ -n "$problems" ]; then
  printf '%s' "$problems" | printable >&2
  exit 1
fi
