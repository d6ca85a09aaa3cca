# shellcheck shell=bash disable=SC2154 # (variables of tests/cluster/up)
# Part of tests/cluster/up: sourced (not run) for --with-node, after the plane and the controllers
# are up. Uses up's variables and helpers: here dir bin api timeout_s, log fail detach alive.
#
# A real node on this machine, every part from a package registry or our own code:
#   containerd v2.4.2 + containerd-shim-runc-v2 (Go module proxy), runc 1.1.5 and the CNI
#   plugins bridge/host-local/loopback (Debian, unpacked into the cache), kubelet v1.36.3 (Go
#   module proxy, the plane's module) registered to the plane as Node `osbx-node`, SPIRE server
#   and agent v1.13.3 (Go module proxy; join-token node attestation, the k8s workload attestor
#   against this kubelet), and, played (tests/played), spire-controller-manager and, in the pool
#   containers, execd (osbx-played-execd in the image osbx.test/execd:played); and a TCP relay
#   (tests/cluster/relay) through which pods reach the API server.
# Images are built from files (tests/cluster/image) and imported: nothing is pulled.
# Network: the bridge osbx-br0 holds 198.18.0.1/24 (RFC 2544 benchmarking range; the node IP);
# pods get 198.18.0.2-254 on it and a route to that subnet only (no default route, no
# masquerading), and an empty resolv.conf: nothing a pod does leaves the machine. One node per
# machine: /run/osbx-test-node names the DIR that holds it.
# Writes DIR/node.env (see tests/cluster/README.md).

node=$dir/node
mkdir -p "$node"
node_name=osbx-node
node_ip=198.18.0.1
bridge=osbx-br0
trust_domain=${OSBX_TEST_TRUST_DOMAIN:-osbx.test}
spire_class=${OSBX_TEST_SPIRE_CLASS:-osbx-test-spire}

# --- one node per machine ------------------------------------------------------------------------
owner_file=/run/osbx-test-node
if [ -s "$owner_file" ]; then
  owner=$(cat "$owner_file")
  if [ "$owner" != "$dir" ] && [ -s "$owner/kubelet.pid" ] && kill -0 "$(cat "$owner/kubelet.pid")" 2>/dev/null; then
    log "a test node runs already (for $owner); stop it with tests/cluster/down $owner"
    exit 2
  fi
  [ "$owner" = "$dir" ] || "$here/down" --node-only "$owner" >&2 || true
fi
echo "$dir" >"$owner_file"

nodebin=$("$here/build" node)
debs=$("$here/debs")
for b in kubelet containerd containerd-shim-runc-v2 ctr spire-server spire-agent osbx-played-execd; do
  [ -x "$nodebin/$b" ] || fail /dev/null "missing $nodebin/$b (run tests/cluster/build node)"
  ln -sfn "$nodebin/$b" "$dir/bin/$b"
done
runc=$debs/runc/usr/sbin/runc
cni_bin=$debs/containernetworking-plugins/usr/lib/cni
busybox=$debs/busybox-static/bin/busybox

# --- network -------------------------------------------------------------------------------------
ip link del "$bridge" 2>/dev/null || true
ip link add "$bridge" type bridge
# A fixed address of its own (locally administered): a bridge without one takes the lowest of its
# ports' addresses, so it changed whenever the pod whose veth lent it ended, and the other pods'
# neighbour entries for 198.18.0.1 went on naming the old one: their traffic to this machine (the
# relay to the API server, a server on the node's address) was lost until ARP asked again, about
# 30 s (an in-cluster verify run's requests timed out while its probe pods came and went).
ip link set "$bridge" address 02:00:c6:12:00:01
ip addr add "$node_ip/24" dev "$bridge"
ip link set "$bridge" up
mkdir -p "$node/cni/net.d" "$node/cni/ipam"
cat >"$node/cni/net.d/10-osbx.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "osbx", "plugins": [{"type": "bridge", "bridge": "$bridge",
  "isGateway": true, "isDefaultGateway": false, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "dataDir": "$node/cni/ipam",
           "ranges": [[{"subnet": "198.18.0.0/24", "rangeStart": "198.18.0.2", "gateway": "$node_ip"}]]}}]}
EOF
: >"$node/resolv.conf"

# --- the API server, for pods --------------------------------------------------------------------
# No kube-proxy: the `kubernetes` Service's ClusterIP routes nowhere, and the API server binds
# 127.0.0.1. A TCP relay (tests/cluster/relay, bytes passed through, TLS end to end) listens on the
# bridge address, which only this machine and the node's pods reach, on a free port; the serving
# certificate names 198.18.0.1 (up). A pod sets KUBERNETES_SERVICE_HOST/PORT to node.env's
# API_FROM_PODS_HOST/PORT in its container's env (which overrides the kubelet's service variables).
ln -sfn "$here/relay" "$dir/bin/api-relay"
rm -f "$node/api-relay.port"
detach "$dir/api-relay.log" "$dir/api-relay.pid" "$dir/bin/api-relay" "$node_ip:0" "127.0.0.1:$api_port" \
  --port-file "$node/api-relay.port"
until [ -s "$node/api-relay.port" ]; do
  alive "$(cat "$dir/api-relay.pid")" || fail "$dir/api-relay.log" "the API server relay exited during startup"
  [ $SECONDS -lt $deadline ] || fail "$dir/api-relay.log" "the API server relay not listening after ${timeout_s}s"
  sleep 0.1
done
api_from_pods_port=$(cat "$node/api-relay.port")

# --- images, built from files --------------------------------------------------------------------
mkdir -p "$node/images"
"$here/image" osbx.test/busybox:1.35 "$node/images/busybox.tar" \
  --file "$busybox:/bin/busybox" --busybox-applets /bin --dir /tmp >/dev/null
"$here/image" osbx.test/pause:1.35 "$node/images/pause.tar" --file "$busybox:/bin/busybox" \
  --entrypoint '["/bin/busybox", "sleep", "2147483647"]' >/dev/null
# execd's image as the execd installer init container expects it (/execd, /bootstrap.sh), played:
# osbx-played-execd (static) and tests/played/bootstrap.sh, with busybox for the installer's sh/cp.
"$here/image" osbx.test/execd:played "$node/images/execd.tar" --file "$busybox:/bin/busybox" --busybox-applets /bin \
  --file "$nodebin/osbx-played-execd:/execd" --file "$here/../played/bootstrap.sh:/bootstrap.sh" >/dev/null
"$here/image" osbx.test/spire-agent:1.13.3 "$node/images/spire-agent.tar" \
  --file "$nodebin/spire-agent:/opt/spire/bin/spire-agent" --dir /tmp --entrypoint '["/opt/spire/bin/spire-agent"]' >/dev/null

# --- containerd ----------------------------------------------------------------------------------
ctrd=$node/containerd
mkdir -p "$ctrd/root" "$ctrd/state" "$ctrd/opt"
# Registry hosts: every registry without a hosts.toml of its own is served by a closed port on
# loopback (`_default`), so that a pull fails here at once, never asking a resolver or a
# registry beyond the machine (the kubelet pulls an imported image again when it must verify
# credentials for it, KEP-2535); a test that mirrors a registry onto one on loopback writes
# its hosts.toml (tests/it/node/mirror.rs).
mkdir -p "$ctrd/certs.d/_default"
cat >"$ctrd/certs.d/_default/hosts.toml" <<EOF
server = "http://127.0.0.1:9"
[host."http://127.0.0.1:9"]
  capabilities = ["pull", "resolve"]
EOF
cat >"$ctrd/config.toml" <<EOF
version = 3
root = '$ctrd/root'
state = '$ctrd/state'
[grpc]
  address = '$ctrd/containerd.sock'
[ttrpc]
  address = '$ctrd/containerd.sock.ttrpc'
[plugins.'io.containerd.internal.v1.opt']
  path = '$ctrd/opt'
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  # Registry hosts (a hosts.toml per registry, read at each pull; above).
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '$ctrd/certs.d'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = 'osbx.test/pause:1.35'
[plugins.'io.containerd.cri.v1.runtime']
  # runc may not lower oom_score_adj here (the pause container's -998): clamp instead of failing.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '$runc'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['$cni_bin']
    conf_dir = '$node/cni/net.d'
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
EOF
# The shim is found on PATH, next to containerd.
node_env=(env HOME="$dir/home" TMPDIR="$dir/tmp" PATH="$dir/bin:/usr/sbin:/usr/bin:/sbin:/bin")
# containerd and the kubelet make what containers see (a snapshot's root, a pod's volumes): with
# up's umask 077 a container's / would be 0700, which no non-root user traverses (the osbx image
# runs as 65532). Both run with the umask of a real node's, 022 (their data stays under DIR, 0700).
(umask 022; detach "$dir/containerd.log" "$dir/containerd.pid" "${node_env[@]}" "$dir/bin/containerd" --config "$ctrd/config.toml")
ctr() { "$dir/bin/ctr" --address "$ctrd/containerd.sock" -n k8s.io "$@"; }
until ctr version >/dev/null 2>>"$dir/containerd.log"; do
  alive "$(cat "$dir/containerd.pid")" || fail "$dir/containerd.log" "containerd exited during startup"
  [ $SECONDS -lt $deadline ] || fail "$dir/containerd.log" "containerd not serving after ${timeout_s}s"
  sleep 0.1
done
for image in "$node/images"/*.tar; do
  ctr images import "$image" >/dev/null 2>>"$dir/containerd.log" || fail "$dir/containerd.log" "importing $image failed"
done

# --- kubelet -------------------------------------------------------------------------------------
read -r kubelet_port kubelet_health spire_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
kl=$node/kubelet
mkdir -p "$kl/root" "$kl/pki"
cat >"$kl/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 with a hybrid cgroup2 mount on these machines: kubelet 1.36 refuses v1 unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$ctrd/containerd.sock
address: $node_ip
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_health
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/client-ca.crt}
authorization: {mode: Webhook}
resolvConf: $node/resolv.conf
failSwapOn: false
# Never evict or garbage-collect the imported images: no registry could bring them back.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
serializeImagePulls: false
EOF
(umask 022; detach "$dir/kubelet.log" "$dir/kubelet.pid" "${node_env[@]}" "$dir/bin/kubelet" \
  --config="$kl/config.yaml" --kubeconfig="$dir/kubeconfig" --root-dir="$kl/root" --cert-dir="$kl/pki" \
  --hostname-override="$node_name" --node-ip="$node_ip" \
  --node-labels=osbx.dev/test-node=true --v=1)
wait_http kubelet "http://127.0.0.1:$kubelet_health/healthz"
until "$bin/kubectl" --kubeconfig="$dir/kubeconfig" get node "$node_name" \
  -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; do
  alive "$(cat "$dir/kubelet.pid")" || fail "$dir/kubelet.log" "kubelet exited during startup"
  [ $SECONDS -lt $deadline ] || fail "$dir/kubelet.log" "Node $node_name not Ready after ${timeout_s}s"
  sleep 0.2
done

# --- SPIRE server and agent ----------------------------------------------------------------------
sp=$node/spire
mkdir -p "$sp/server" "$sp/agent" "$sp/agent-sockets"
cat >"$sp/server.conf" <<EOF
server {
  bind_address = "127.0.0.1"
  bind_port = "$spire_port"
  socket_path = "$sp/server.sock"
  trust_domain = "$trust_domain"
  data_dir = "$sp/server"
  log_level = "INFO"
  default_x509_svid_ttl = "1h"
}
plugins {
  DataStore "sql" {
    plugin_data { database_type = "sqlite3" connection_string = "$sp/server/datastore.sqlite3" }
  }
  KeyManager "memory" { plugin_data {} }
  NodeAttestor "join_token" { plugin_data {} }
}
EOF
detach "$dir/spire-server.log" "$dir/spire-server.pid" "${node_env[@]}" "$dir/bin/spire-server" run -config "$sp/server.conf"
until "$dir/bin/spire-server" healthcheck -socketPath "$sp/server.sock" >/dev/null 2>&1; do
  alive "$(cat "$dir/spire-server.pid")" || fail "$dir/spire-server.log" "spire-server exited during startup"
  [ $SECONDS -lt $deadline ] || fail "$dir/spire-server.log" "spire-server not healthy after ${timeout_s}s"
  sleep 0.2
done
token=$("$dir/bin/spire-server" token generate -socketPath "$sp/server.sock" -ttl 86400 | awk '/Token:/ { print $2 }')
[ -n "$token" ] || fail "$dir/spire-server.log" "spire-server generated no join token"
agent_id="spiffe://$trust_domain/spire/agent/join_token/$token"
# The agent reaches the kubelet at the node name it is given (here: the node IP) with a client
# certificate the kubelet trusts (the plane's admin).
cat >"$sp/agent.conf" <<EOF
agent {
  data_dir = "$sp/agent"
  log_level = "INFO"
  server_address = "127.0.0.1"
  server_port = "$spire_port"
  socket_path = "$sp/agent-sockets/spire-agent.sock"
  trust_domain = "$trust_domain"
  insecure_bootstrap = true
  join_token = "$token"
}
plugins {
  NodeAttestor "join_token" { plugin_data {} }
  # On disk: an agent restarted by tests/cluster/node-agent keeps its SVID (a join token is used once).
  KeyManager "disk" { plugin_data { directory = "$sp/agent" } }
  WorkloadAttestor "k8s" {
    plugin_data {
      kubelet_secure_port = $kubelet_port
      node_name = "$node_ip"
      skip_kubelet_verification = true
      certificate_path = "$dir/admin.crt"
      private_key_path = "$dir/admin.key"
    }
  }
}
EOF
detach "$dir/spire-agent.log" "$dir/spire-agent.pid" "${node_env[@]}" "$dir/bin/spire-agent" run -config "$sp/agent.conf"
until "$dir/bin/spire-agent" healthcheck -socketPath "$sp/agent-sockets/spire-agent.sock" >/dev/null 2>&1; do
  alive "$(cat "$dir/spire-agent.pid")" || fail "$dir/spire-agent.log" "spire-agent exited during startup"
  [ $SECONDS -lt $deadline ] || fail "$dir/spire-agent.log" "spire-agent not healthy after ${timeout_s}s"
  sleep 0.2
done

# --- spire-controller-manager, played ------------------------------------------------------------
detach "$dir/played-spire-controller-manager.log" "$dir/played-spire-controller-manager.pid" "${node_env[@]}" \
  "$dir/bin/osbx-played" spire-controller-manager --kubeconfig="$dir/kubeconfig" \
  --spire-server="$dir/bin/spire-server" --server-socket="$sp/server.sock" \
  --trust-domain="$trust_domain" --class-name="$spire_class" --parent-id="$agent_id" --node="$node_name"

# --- node.env ------------------------------------------------------------------------------------
{
  kv() { printf '%s=%s\n' "$1" "$2"; }
  kv NODE_NAME "$node_name"
  kv NODE_IP "$node_ip"
  kv NODE_BRIDGE "$bridge"
  kv CONTAINERD_SOCKET "$ctrd/containerd.sock"
  kv CONTAINERD_TASK_DIR "$ctrd/state/io.containerd.runtime.v2.task/k8s.io"
  kv CONTAINERD_HOSTS_DIR "$ctrd/certs.d"
  kv NODE_IMAGES "$node/images"
  kv KUBELET_PORT "$kubelet_port"
  kv KUBELET_ROOT "$kl/root"
  kv PROBE_IMAGE osbx.test/busybox:1.35
  kv SPIRE_AGENT_IMAGE osbx.test/spire-agent:1.13.3
  kv EXECD_IMAGE osbx.test/execd:played
  kv SPIRE_TRUST_DOMAIN "$trust_domain"
  kv SPIRE_CLASS_NAME "$spire_class"
  kv SPIRE_SERVER_SOCKET "$sp/server.sock"
  kv SPIRE_AGENT_SOCKET_DIR "$sp/agent-sockets"
  kv SPIRE_AGENT_ID "$agent_id"
  kv NODE_BIN "$dir/bin"
  kv API_FROM_PODS_HOST "$node_ip"
  kv API_FROM_PODS_PORT "$api_from_pods_port"
} >"$dir/node.env.tmp"
mv -f "$dir/node.env.tmp" "$dir/node.env"
log "node $node_name Ready ($node_ip; containerd, kubelet, spire-server, spire-agent; the API server for pods at $node_ip:$api_from_pods_port); see $dir/node.env"
