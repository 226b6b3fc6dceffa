#!/usr/bin/env bash
# A single-node Kubernetes 1.20 cluster on 127.0.0.1 for the tests (tests/kubernetes), built offline
# from Debian's `kubernetes` source package; the kubelet runs pods in the local Docker engine.
#
#   tools/k8s_dev_cluster.sh build [--binaries DIR]   fill the cache (once per machine)
#   tools/k8s_dev_cluster.sh start                    start the cluster; prints the kubeconfig's path
#   tools/k8s_dev_cluster.sh stop                     stop every component, remove the pods' containers
#   tools/k8s_dev_cluster.sh status                   what runs; exit 0 only when the node is Ready
#
# The cache (SMLAUNCH_K8S_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/smlaunch/k8s) holds
# bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,pause}. `build --binaries DIR`
# takes them from DIR/*.xz, each checked against DIR/SHA256SUMS (sums of the uncompressed files);
# without it they are built from Debian bookworm's source package (about 35 minutes on 2 cores), the
# kubelet patched with tools/k8s/kubelet-oom.patch where CAP_SYS_RESOURCE is missing. Either way the
# pause binary becomes the Docker image k8s.gcr.io/pause:3.2. A complete cache is reused.
#
# The run directory (SMLAUNCH_K8S_RUN, default <cache>/run) holds the keys, the admin kubeconfig,
# each component's pid and log. Ports are free ones picked at start; everything listens on 127.0.0.1.
# One cluster per Docker engine: two kubelets would remove each other's containers.
# Exit status: 0 done, 1 failed, 2 a prerequisite is missing (the message names it); status: 3 when
# the node is not Ready.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${SMLAUNCH_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/smlaunch/k8s}"
RUN="${SMLAUNCH_K8S_RUN:-$CACHE/run}"
START_TIMEOUT="${SMLAUNCH_K8S_START_TIMEOUT:-90}"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet pause)
# Started in this order.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)
PAUSE_IMAGE="k8s.gcr.io/pause:3.2"
SOURCE_SUITE="bookworm"  # the suite whose source package is Kubernetes 1.20.2
MAKE_WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet"

docker_answers() { command -v docker >/dev/null && docker info >/dev/null 2>&1; }
log() { echo "k8s_dev_cluster: $*" >&2; }
die() { log "$*"; exit 1; }
missing() { log "$*"; exit 2; }

usage() {
  echo "usage: $0 build [--binaries DIR] | start | stop | status" >&2
  exit 2
}

# --- build -----------------------------------------------------------------------------------------

cache_complete() {
  [ -f "$CACHE/bin/.complete" ] || return 1
  local name
  for name in "${BINARIES[@]}"; do [ -x "$CACHE/bin/$name" ] || return 1; done
}

apt_install() {  # packages not yet installed, when root with apt-get; else say which are missing
  local wanted=() pkg
  for pkg in "$@"; do dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || wanted+=("$pkg"); done
  [ "${#wanted[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${wanted[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${wanted[@]}" >&2 \
      || missing "apt-get could not install ${wanted[*]}"
  else
    missing "needs the Debian packages ${wanted[*]} (install them as root, or run this as root)"
  fi
}

# True when this process lacks CAP_SYS_RESOURCE (bit 24 of CapEff): OOM scores cannot go below 0.
lacks_sys_resource() {
  local capeff
  capeff="$(awk '/^CapEff:/ {print $2}' /proc/self/status)"
  (( (16#$capeff >> 24 & 1) == 0 ))
}

# Decompress DIR/<name>.xz for every binary into $1 and check each against DIR/SHA256SUMS.
binaries_from() {
  local dir="$1" out="$2" name want got
  [ -f "$dir/SHA256SUMS" ] || missing "--binaries $dir: no SHA256SUMS there"
  for name in "${BINARIES[@]}"; do
    [ -f "$dir/$name.xz" ] || missing "--binaries $dir: $name.xz is missing"
    want="$(awk -v n="$name" '$2 == n || $2 == "*" n {print $1}' "$dir/SHA256SUMS")"
    [ -n "$want" ] || die "--binaries $dir: SHA256SUMS has no line for $name"
    xz -dc "$dir/$name.xz" >"$out/$name"
    got="$(sha256sum "$out/$name" | awk '{print $1}')"
    [ "$got" = "$want" ] || die "refusing $dir/$name.xz: its sha256 is $got, SHA256SUMS says $want"
    chmod 755 "$out/$name"
  done
  log "verified ${BINARIES[*]} from $dir"
}

# The machine's own Debian mirror (deb822 or one-line format), for the deb-src entry.
debian_mirror() {
  local uri
  uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  [ -n "$uri" ] || uri="$(awk '$1 == "deb" && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
  echo "${uri:-http://deb.debian.org/debian}"
}

# Build the binaries from Debian's source package into $1, without touching the machine's apt setup.
binaries_from_source() {
  local out="$1" src="$CACHE/src" tree
  apt_install golang-go rsync jq build-essential dpkg-dev
  mkdir -p "$src/lists/partial"
  cat >"$src/deb-src.sources" <<EOF
Types: deb-src
URIs: $(debian_mirror)
Suites: $SOURCE_SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  local apt_opts=(-o "Dir::Etc::SourceList=$src/deb-src.sources" -o "Dir::Etc::SourceParts=/nonexistent"
    -o "Dir::State::Lists=$src/lists")
  tree="$(find "$src" -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)"
  if [ -z "$tree" ]; then
    log "fetching Debian's kubernetes source package ($SOURCE_SUITE)"
    apt-get "${apt_opts[@]}" update >&2 || missing "apt-get update of the deb-src list failed"
    (cd "$src" && apt-get "${apt_opts[@]}" source kubernetes >&2) || missing "apt-get source kubernetes failed"
    tree="$(find "$src" -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)"
    [ -n "$tree" ] || die "apt-get source kubernetes unpacked no kubernetes-* directory in $src"
  fi
  if lacks_sys_resource && ! patch -d "$tree" -p1 -R --dry-run -s <"$HERE/k8s/kubelet-oom.patch" >/dev/null 2>&1; then
    log "no CAP_SYS_RESOURCE here: applying tools/k8s/kubelet-oom.patch"
    patch -d "$tree" -p1 --forward <"$HERE/k8s/kubelet-oom.patch" >&2
  fi
  log "building $MAKE_WHAT (about 35 minutes on 2 cores the first time)"
  make -C "$tree" WHAT="$MAKE_WHAT" >&2 || die "make in $tree failed"
  local name
  for name in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
    cp "$tree/_output/local/bin/linux/amd64/$name" "$out/$name"
  done
  gcc -Os -static -DVERSION=3.2 -o "$out/pause" "$tree/build/pause/linux/pause.c" || die "gcc of pause.c failed"
}

# k8s.gcr.io/pause:3.2 in Docker, from the cache's pause binary (no registry is reachable).
ensure_pause_image() {
  docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1 && return 0
  local dir
  dir="$(mktemp -d)"
  cp "$CACHE/bin/pause" "$dir/pause"
  tar -C "$dir" -cf - pause | docker import -c 'ENTRYPOINT ["/pause"]' - "$PAUSE_IMAGE" >/dev/null
  rm -rf "$dir"
  log "imported $PAUSE_IMAGE into Docker"
}

cmd_build() {
  local binaries=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --binaries) [ $# -ge 2 ] || usage; binaries="$2"; shift 2;;
      *) usage;;
    esac
  done
  apt_install etcd-server etcd-client openssl xz-utils
  if cache_complete; then
    log "cache $CACHE is complete: reusing it"
  else
    mkdir -p "$CACHE"
    STAGING="$(mktemp -d "$CACHE/.bin.XXXXXX")"
    trap 'rm -rf "$STAGING"' EXIT  # a refused or failed build leaves nothing half-made
    if [ -n "$binaries" ]; then binaries_from "$binaries" "$STAGING"; else binaries_from_source "$STAGING"; fi
    rm -rf "${CACHE:?}/bin"
    mv "$STAGING" "$CACHE/bin"
    touch "$CACHE/bin/.complete"
  fi
  docker_answers || missing "no Docker engine answers (docker info): the pause image goes there"
  ensure_pause_image
  echo "$CACHE"
}

# --- start / stop / status -------------------------------------------------------------------------

pid_of() { cat "$RUN/pids/$1" 2>/dev/null || true; }
alive() { local pid; pid="$(pid_of "$1")"; [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

free_ports() {  # $1 free TCP ports on 127.0.0.1, one per line
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))
PY
}

# GET a path of the API server with the admin token; prints the body; fails on no answer or non-2xx.
api_get() {
  python3 - "$(cat "$RUN/server")" "$(cat "$RUN/token")" "$1" <<'PY'
import ssl, sys, urllib.request
server, token, path = sys.argv[1:]
request = urllib.request.Request(server + path, headers={"Authorization": f"Bearer {token}"})
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE  # a readiness probe on 127.0.0.1; clients use the kubeconfig's CA
with urllib.request.urlopen(request, timeout=5, context=context) as response:
    sys.stdout.write(response.read().decode())
PY
}

node_ready() {
  api_get /api/v1/nodes/localhost 2>/dev/null | python3 -c '
import json, sys
conditions = json.load(sys.stdin).get("status", {}).get("conditions", [])
sys.exit(0 if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else 1)'
}

launch() {  # $1: component, then its command; own session, output to logs/<component>.log
  local name="$1"
  shift
  setsid "$@" >"$RUN/logs/$name.log" 2>&1 </dev/null &
  echo "$!" >"$RUN/pids/$name"
}

# Wait (bounded by the start deadline) until "$@" succeeds, every component started so far alive.
await() {
  local what="$1" name
  shift
  until "$@" >/dev/null 2>&1; do
    for name in "${COMPONENTS[@]}"; do
      if [ -f "$RUN/pids/$name" ] && ! alive "$name"; then fail_start "$name" "$name exited while waiting for $what"; fi
    done
    if [ "$SECONDS" -ge "$DEADLINE" ]; then fail_start "$LAST" "$what not reached in ${START_TIMEOUT}s"; fi
    sleep 0.5
  done
}

fail_start() {  # $1: the failing component, $2: why
  log "start failed: $2; the last lines of $RUN/logs/$1.log:"
  tail -n 30 "$RUN/logs/$1.log" >&2 || true
  cmd_stop >/dev/null 2>&1 || true
  exit 1
}

write_kubeconfig() {  # $1: server URL, $2: token, $3: CA file
  cat >"$RUN/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: smlaunch-dev
  cluster:
    server: $1
    certificate-authority: $3
users:
- name: admin
  user:
    token: $2
contexts:
- name: smlaunch-dev
  context:
    cluster: smlaunch-dev
    user: admin
    namespace: default
current-context: smlaunch-dev
EOF
  chmod 600 "$RUN/kubeconfig"
}

cmd_start() {
  [ $# -eq 0 ] || usage
  cache_complete || missing "the cache $CACHE is not built: run $0 build [--binaries DIR] first"
  docker_answers || missing "no Docker engine answers (docker info)"
  local tool
  for tool in etcd openssl python3 setsid; do command -v "$tool" >/dev/null || missing "$tool is not installed"; done
  [ "$(id -u)" = 0 ] || missing "the kubelet needs root (it mounts volumes and runs containers)"
  if alive kubelet && node_ready; then
    log "already running"
    echo "$RUN/kubeconfig"
    return 0
  fi
  local other
  other="$(pgrep -x kubelet | head -n1 || true)"
  [ -z "$other" ] || missing "a kubelet already runs here (pid $other): one cluster per Docker engine; stop it first"
  cmd_stop >/dev/null 2>&1 || true  # whatever a previous start left in this run directory
  rm -rf "$RUN"
  mkdir -p "$RUN"/{pids,logs,etcd,certs,kubelet}
  # What /var/log/pods held before: stop removes the rest (the kubelet removes a deleted pod's log
  # directory only at its next container GC, a minute later; stop may come sooner).
  { ls /var/log/pods 2>/dev/null || true; } >"$RUN/pod-logs-before"
  ensure_pause_image

  local ports etcd_port peer_port api_port kubelet_port token server bin="$CACHE/bin"
  mapfile -t ports < <(free_ports 4)
  etcd_port="${ports[0]}" peer_port="${ports[1]}" api_port="${ports[2]}" kubelet_port="${ports[3]}"
  token="$(openssl rand -hex 24)"
  server="https://127.0.0.1:$api_port"
  echo "$token" >"$RUN/token"
  echo "$server" >"$RUN/server"
  chmod 600 "$RUN/token"
  echo "$token,admin,admin,\"system:masters\"" >"$RUN/tokens.csv"
  openssl genrsa -out "$RUN/sa.key" 2048 2>/dev/null
  openssl rsa -in "$RUN/sa.key" -pubout -out "$RUN/sa.pub" 2>/dev/null
  DEADLINE=$((SECONDS + START_TIMEOUT))

  LAST=etcd
  launch etcd etcd --name smlaunch-dev --data-dir "$RUN/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "smlaunch-dev=http://127.0.0.1:$peer_port"
  await "etcd health" etcdctl --endpoints "http://127.0.0.1:$etcd_port" endpoint health

  LAST=kube-apiserver
  launch kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" --cert-dir "$RUN/certs" \
    --service-cluster-ip-range 10.0.0.0/24 --authorization-mode Node,RBAC --token-auth-file "$RUN/tokens.csv" \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$RUN/sa.pub" \
    --service-account-signing-key-file "$RUN/sa.key" --allow-privileged=true \
    --kubelet-preferred-address-types Hostname
  await "the API server's /readyz" api_get /readyz
  # The API server's self-signed certificate (serving cert, then its CA) names 127.0.0.1.
  write_kubeconfig "$server" "$token" "$RUN/certs/apiserver.crt"

  LAST=kube-controller-manager
  launch kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$RUN/kubeconfig" \
    --leader-elect=false --service-account-private-key-file "$RUN/sa.key" \
    --root-ca-file "$RUN/certs/apiserver.crt" --bind-address 127.0.0.1 --secure-port 0 --port 0
  LAST=kube-scheduler
  launch kube-scheduler "$bin/kube-scheduler" --kubeconfig "$RUN/kubeconfig" --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port 0 --port 0
  # Node name localhost with the API server's Hostname address type: logs and exec reach the kubelet
  # over loopback. OOM score 0: negative ones need CAP_SYS_RESOURCE. No QoS cgroups, no evictions,
  # no image GC: a dev node on a shared machine must not touch what it did not start. Node status
  # checked every second (posted only when it changes): Ready a second after the runtime is, not 10.
  LAST=kubelet
  launch kubelet "$bin/kubelet" --kubeconfig "$RUN/kubeconfig" --container-runtime docker \
    --docker-endpoint unix:///var/run/docker.sock --pod-infra-container-image "$PAUSE_IMAGE" \
    --fail-swap-on=false --cgroup-driver cgroupfs --hostname-override localhost --address 127.0.0.1 \
    --port "$kubelet_port" --read-only-port 0 --healthz-port 0 --root-dir "$RUN/kubelet" \
    --cert-dir "$RUN/kubelet/pki" --volume-plugin-dir "$RUN/kubelet/volume-plugins" --register-node=true \
    --oom-score-adj 0 --cgroups-per-qos=false --enforce-node-allocatable= --eviction-hard= \
    --image-gc-high-threshold 100 --node-status-update-frequency 1s
  await "node localhost Ready" node_ready
  log "node localhost Ready at $server in $((SECONDS - DEADLINE + START_TIMEOUT))s"
  echo "$RUN/kubeconfig"
}

# End the named components: SIGTERM to all, SIGKILL to any still there after 10 s.
end_components() {
  local name pid pids=()
  for name in "$@"; do
    pid="$(pid_of "$name")"
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || true
    pids+=("$pid")
    rm -f "$RUN/pids/$name"
  done
  [ "${#pids[@]}" -gt 0 ] || return 0
  for _ in $(seq 1 50); do
    kill -0 "${pids[@]}" 2>/dev/null || break  # true while any of them is left
    sleep 0.2
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}

cmd_stop() {
  [ $# -eq 0 ] || usage
  local left=()
  # The kubelet first, so that it starts no container while the control plane goes.
  end_components kubelet
  end_components kube-scheduler kube-controller-manager kube-apiserver etcd
  # The pods' containers (the kubelet's, by their labels), the logs it kept of its pods in the fixed
  # /var/log/pods and /var/log/containers, then the volumes it mounted under its root.
  local uids=() uid link
  if docker_answers; then
    mapfile -t left < <(docker ps -aq --filter label=io.kubernetes.pod.uid)
    if [ "${#left[@]}" -gt 0 ]; then
      mapfile -t uids < <(docker inspect --format '{{index .Config.Labels "io.kubernetes.pod.uid"}}' "${left[@]}")
      docker rm -f -v "${left[@]}" >/dev/null
    fi
  fi
  [ -d "$RUN/kubelet/pods" ] && mapfile -t -O "${#uids[@]}" uids < <(ls "$RUN/kubelet/pods")
  for uid in "${uids[@]}"; do
    [ -n "$uid" ] || continue
    for link in /var/log/containers/*.log; do
      [[ "$(readlink "$link" 2>/dev/null)" == /var/log/pods/*_"$uid"/* ]] && rm -f "$link"
    done
    rm -rf /var/log/pods/*_"$uid"
  done
  if [ -f "$RUN/pod-logs-before" ] && [ -d /var/log/pods ]; then
    local dir
    for dir in /var/log/pods/*; do
      [ -d "$dir" ] || continue
      grep -qxF "$(basename "$dir")" "$RUN/pod-logs-before" || rm -rf "$dir"
    done
  fi
  if [ -d "$RUN" ]; then
    awk -v root="$RUN/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r | while read -r mount; do
      umount "$mount" 2>/dev/null || umount -l "$mount"
    done
  fi
  log "stopped"
}

cmd_status() {
  [ $# -eq 0 ] || usage
  local name running=0
  for name in "${COMPONENTS[@]}"; do
    if alive "$name"; then echo "$name: running (pid $(pid_of "$name"))"; running=$((running + 1))
    else echo "$name: stopped"; fi
  done
  if [ "$running" -gt 0 ] && [ -f "$RUN/server" ] && node_ready; then
    echo "node localhost: Ready at $(cat "$RUN/server")"
    echo "kubeconfig: $RUN/kubeconfig"
    [ "$running" -eq "${#COMPONENTS[@]}" ]
  else
    echo "node localhost: not Ready"
    return 3
  fi
}

case "${1:-}" in
  build) shift; cmd_build "$@";;
  start) shift; cmd_start "$@";;
  stop) shift; cmd_stop "$@";;
  status) shift; cmd_status "$@";;
  *) usage;;
esac
