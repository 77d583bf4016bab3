#!/usr/bin/env bash
# check-gpu-node.sh: check a GPU agent end to end, the way sessions will use it.
#
#   check-gpu-node.sh [-i IMAGE] [-d INDEX] [--vendor auto|nvidia|amd] [--cdi auto|yes|no]
#
# NVIDIA: driver (nvidia-smi), toolkit (nvidia-ctk --version), the nvidia runtime in
# `docker info` (and not the default runtime), the CDI spec, then containers:
#   --gpus device=INDEX      sees exactly GPU INDEX (same UUID as on the host);
#   --device nvidia.com/gpu=INDEX (CDI; engines that support it) the same;
#   no GPU request           sees no GPU.
# AMD: /dev/kfd and render nodes, rocm-smi if installed, then a container given
# /dev/kfd and one render node sees exactly that node.
# Stops at the first failing step with a message and exit code 1 (2: bad usage).
# IMAGE needs only a shell: the NVIDIA hook or CDI puts nvidia-smi into the container.
# Default bai/session:latest (built by playbooks/image_build.yml, present on agents).
set -uo pipefail
# Matches use [[ ]], not `printf ... | grep -q`: under pipefail, grep -q leaving at its first
# match can end bash's line-buffered printf with SIGPIPE and fail a check that matched.

IMAGE=bai/session:latest
INDEX=0
VENDOR=auto
CDI=auto
# Where the CDI spec may be (space-separated; CHECK_GPU_CDI_SPECS overrides).
read -r -a CDI_SPECS <<<"${CHECK_GPU_CDI_SPECS:-/etc/cdi/nvidia.yaml /var/run/cdi/nvidia.yaml}"

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    -i|--image) IMAGE=${2:?}; shift 2 ;;
    -d|--device) INDEX=${2:?}; shift 2 ;;
    --vendor) VENDOR=${2:?}; shift 2 ;;
    --cdi) CDI=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
case "$INDEX" in ''|*[!0-9]*) echo "-d needs a device index (a number), got '$INDEX'" >&2; exit 2 ;; esac
case "$VENDOR" in auto|nvidia|amd) ;; *) echo "--vendor: auto, nvidia or amd" >&2; exit 2 ;; esac
case "$CDI" in auto|yes|no) ;; *) echo "--cdi: auto, yes or no" >&2; exit 2 ;; esac

STEP=0
ok() { STEP=$((STEP + 1)); printf 'ok   %d. %s\n' "$STEP" "$1"; }
fail() {
  STEP=$((STEP + 1))
  printf 'FAIL %d. %s\n' "$STEP" "$1" >&2
  [ $# -gt 1 ] && printf '     %s\n' "${@:2}" >&2
  exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }
# Containers are labelled so a leftover is easy to find: docker ps -a -f label=...
LABEL=ai.backend.cluster.gpu-check=1
run_in() { docker run --rm --label "$LABEL" "$@" 2>&1; }

if [ "$VENDOR" = auto ]; then
  if have nvidia-smi || compgen -G '/dev/nvidia[0-9]*' >/dev/null; then VENDOR=nvidia
  elif [ -e /dev/kfd ]; then VENDOR=amd
  else fail "accelerator: none found (no nvidia-smi, no /dev/nvidia*, no /dev/kfd)" \
    "This is not a GPU node, or its driver is not installed. Use --vendor to force one."
  fi
fi
have docker || fail "docker: the docker CLI is not installed"
docker info >/dev/null 2>&1 || fail "docker: the engine does not answer (docker info)" \
  "Start it (systemctl start docker) or run this as a user allowed to use it."

check_nvidia() {
  local smi count uuid out lines default runtimes spec
  have nvidia-smi || fail "driver: nvidia-smi not found" \
    "Install the NVIDIA driver and its utilities (Ubuntu: ubuntu-drivers install --gpgpu; Debian: nvidia-driver nvidia-smi)."
  smi=$(nvidia-smi --query-gpu=index,uuid,name,driver_version --format=csv,noheader 2>&1) ||
    fail "driver: nvidia-smi fails" "$smi" "Reboot after a driver upgrade; check dmesg | grep -i nvrm."
  count=$(printf '%s\n' "$smi" | grep -c .)
  uuid=$(printf '%s\n' "$smi" | awk -F', *' -v i="$INDEX" '$1 == i {print $2}')
  [ -n "$uuid" ] || fail "driver: no GPU with index $INDEX (nvidia-smi lists $count)" "$smi"
  ok "driver: $count GPU(s), $(printf '%s\n' "$smi" | awk -F', *' 'NR==1 {print $3 ", driver " $4}')"

  have nvidia-ctk || fail "toolkit: nvidia-ctk not found" \
    "Install nvidia-container-toolkit (roles/gpu_runtime does: ansible-playbook site.yml --tags gpu_runtime)."
  out=$(nvidia-ctk --version 2>&1) || fail "toolkit: nvidia-ctk --version fails" "$out"
  ok "toolkit: $(printf '%s\n' "$out" | head -n1)"

  runtimes=$(docker info --format '{{json .Runtimes}}' 2>&1)
  default=$(docker info --format '{{.DefaultRuntime}}' 2>&1)
  [[ $runtimes == *'"nvidia"'* ]] || fail "runtime: nvidia is not registered with the engine" \
    "docker info lists: $runtimes" "Run site.yml (gpu_runtime then docker_engine) so daemon.json names it, and restart the engine."
  [ "$default" != nvidia ] || fail "runtime: nvidia is the DEFAULT runtime" \
    "Every container would then see the GPUs its image asks for (CUDA images ask for all). Remove default-runtime from daemon.json."
  ok "runtime: nvidia registered, default runtime $default"

  spec=
  for f in "${CDI_SPECS[@]}"; do [ -s "$f" ] && { spec=$f; break; }; done
  [ -n "$spec" ] || fail "CDI: no spec in ${CDI_SPECS[*]}" \
    "Generate it: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
  out=$(nvidia-ctk cdi list 2>/dev/null)
  [[ $'\n'$out$'\n' == *$'\n'"nvidia.com/gpu=$INDEX"$'\n'* ]] || fail "CDI: $spec has no device nvidia.com/gpu=$INDEX" \
    "nvidia-ctk cdi list says: $(printf '%s' "$out" | tr '\n' ' ')" "Regenerate the spec (a new driver or GPU changes it)."
  ok "CDI: $spec lists nvidia.com/gpu=$INDEX"

  need_image

  out=$(run_in --gpus "device=$INDEX" "$IMAGE" nvidia-smi -L)
  lines=$(printf '%s\n' "$out" | grep -c '^GPU ')
  if [ "$lines" != 1 ] || [[ $out != *"$uuid"* ]]; then
    fail "container (--gpus device=$INDEX): expected exactly GPU $INDEX ($uuid), saw $lines" "$out"
  fi
  ok "container (--gpus device=$INDEX) sees exactly $uuid"

  if [ "$CDI" != no ]; then
    out=$(run_in --device "nvidia.com/gpu=$INDEX" "$IMAGE" nvidia-smi -L)
    lines=$(printf '%s\n' "$out" | grep -c '^GPU ')
    if [ "$lines" = 1 ] && [[ $out == *"$uuid"* ]]; then
      ok "container (--device nvidia.com/gpu=$INDEX, CDI) sees exactly $uuid"
    elif [ "$CDI" = yes ]; then
      fail "container (CDI nvidia.com/gpu=$INDEX): expected exactly $uuid, saw $lines" "$out" \
        "Docker 25-27 needs {\"features\": {\"cdi\": true}} in daemon.json (docker_engine_extra_config); 28+ has it on."
    else
      printf 'skip     CDI container: this engine does not inject CDI devices (%s)\n' "$(printf '%s' "$out" | head -n1)"
    fi
  fi

  out=$(run_in "$IMAGE" sh -c 'ls /dev/nvidia[0-9]* 2>/dev/null; command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null')
  printf '%s' "$out" | grep -Eq '/dev/nvidia[0-9]|^GPU ' && fail \
    "container without a GPU request sees GPUs" "$out" "Is nvidia the default runtime, or does the image set NVIDIA_VISIBLE_DEVICES?"
  ok "container without a GPU request sees none"
}

check_amd() {
  local nodes node out
  [ -e /dev/kfd ] || fail "driver: /dev/kfd missing" "Install the amdgpu driver (amdgpu-install --usecase=dkms,rocm) and reboot."
  nodes=$(compgen -G '/dev/dri/renderD*' | sort -V)
  [ -n "$nodes" ] || fail "driver: no /dev/dri/renderD* node"
  ok "driver: /dev/kfd and $(printf '%s\n' "$nodes" | grep -c .) render node(s)"
  node=$(printf '%s\n' "$nodes" | sed -n "$((INDEX + 1))p")
  [ -n "$node" ] || fail "driver: no render node for index $INDEX" "$nodes"
  if have rocm-smi || [ -x /opt/rocm/bin/rocm-smi ]; then
    out=$(PATH=$PATH:/opt/rocm/bin rocm-smi --showproductname 2>&1) || fail "rocm-smi fails" "$out"
    ok "rocm-smi answers"
  fi
  need_image
  # shellcheck disable=SC2016 # expanded inside the container
  out=$(run_in --device /dev/kfd --device "$node" --group-add video --group-add "$(stat -c %g "$node")" \
    "$IMAGE" sh -c 'ls /dev/dri/ | grep -c "^renderD"; test -r /dev/kfd && test -w /dev/kfd && echo kfd-ok')
  if [ "$(printf '%s\n' "$out" | head -n1)" != 1 ] || [[ $out != *kfd-ok* ]]; then
    fail "container (--device /dev/kfd --device $node): expected /dev/kfd usable and exactly one render node" "$out"
  fi
  ok "container sees /dev/kfd and exactly $node"
}

need_image() {
  docker image inspect "$IMAGE" >/dev/null 2>&1 || fail "image: $IMAGE is not on this node" \
    "Load it (docker save ... | docker load) or pass another with -i (any image with a shell)."
}

echo "check-gpu-node: vendor $VENDOR, device $INDEX, image $IMAGE"
if [ "$VENDOR" = nvidia ]; then check_nvidia; else check_amd; fi
echo "all checks passed"
