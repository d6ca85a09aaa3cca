# shellcheck shell=bash disable=SC2154 # (variables of tests/cluster/up)
# Part of tests/cluster/up: sourced (not run) once the plane is ready, for --with-controllers. Uses
# up's variables and helpers: here dir bin api timeout_s controllers, log fail detach alive.
# Starts, in this order: the Flux CRDs, the git/static HTTP server, kube-controller-manager,
# kube-scheduler, kwok, source-controller, kustomize- and helm-controller, the played OpenSandbox
# controller (osbx-played, our own code: no registry serves the real one); waits on their health
# endpoints; writes DIR/controllers.env.

shared=$(cd "$here/../../../shared" 2>/dev/null && pwd) ||
  fail /dev/null "the shared directory ($here/../../../shared) is missing: it holds the Flux CRDs"
kubectl() { "$bin/kubectl" --kubeconfig="$dir/kubeconfig" "$@"; }
deadline=$((SECONDS + timeout_s))

# Every process runs as DIR/bin/<name> (a symlink to the built binary), so that its command line
# mentions DIR (tests/cluster/down checks that before it signals a pid) and `ps` tells the planes
# apart. HOME and TMPDIR point into DIR: nothing is written outside it.
mkdir -p "$dir/bin" "$dir/home" "$dir/tmp"
for b in "${controllers[@]:1}"; do
  [ "$b" != played-opensandbox-controller ] || b=osbx-played
  ln -sfn "$bin/$b" "$dir/bin/$b"
done
run_env=(env HOME="$dir/home" TMPDIR="$dir/tmp" KUBECONFIG="$dir/kubeconfig")

# --- 1. Flux CRDs --------------------------------------------------------------------------------
t0=$SECONDS
kubectl apply --server-side --force-conflicts -f "$shared/crds/flux/" >/dev/null
kubectl wait --for=condition=Established --timeout="$((deadline - SECONDS))s" -f "$shared/crds/flux/" >/dev/null ||
  fail "$dir/apiserver.log" "the Flux CRDs did not become Established"
log "Flux CRDs Established ($((SECONDS - t0))s)"

# --- ports ---------------------------------------------------------------------------------------
read -r git_port kcm_port sched_port kwok_port src_storage src_metrics src_health ks_metrics ks_health \
  hc_metrics hc_health < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(11)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
lo=127.0.0.1

# --- 2. git smart-HTTP + static files ------------------------------------------------------------
mkdir -p "$dir/git" "$dir/static"
detach "$dir/githttp.log" "$dir/githttp.pid" "${run_env[@]}" python3 "$here/githttp.py" \
  --root "$dir" --bind $lo --port "$git_port"

# --- 3. kube-controller-manager, kube-scheduler, kwok --------------------------------------------
# The controllers a cluster of fake Nodes needs. node-lifecycle-controller removes the
# node.kubernetes.io/not-ready taint the apiserver puts on every new Node (without it, nothing is
# ever scheduled); kwok renews the Nodes' leases. No node IPAM, no endpoints (pod IPs are loopback
# addresses, which Endpoints reject). The resource quota controller keeps a ResourceQuota's usage,
# without which the API server admits no pod in its namespace (the sandbox-quota component).
kcm_controllers=node-lifecycle-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller
kcm_controllers+=,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller
kcm_controllers+=,deployment-controller,replicaset-controller,statefulset-controller,daemonset-controller
kcm_controllers+=,job-controller,cronjob-controller,ttl-after-finished-controller,disruption-controller
kcm_controllers+=,garbage-collector-controller,pod-garbage-collector-controller,resourcequota-controller
detach "$dir/kube-controller-manager.log" "$dir/kube-controller-manager.pid" "${run_env[@]}" \
  "$dir/bin/kube-controller-manager" \
  --kubeconfig="$dir/kubeconfig" --leader-elect=false \
  --bind-address=$lo --secure-port="$kcm_port" --cert-dir="$dir/kube-controller-manager-certs" \
  --service-account-private-key-file="$dir/sa.key" --root-ca-file="$dir/serving-ca.crt" \
  --use-service-account-credentials=false --controllers="$kcm_controllers" \
  --concurrent-deployment-syncs=2 --concurrent-replicaset-syncs=2 --v=1
detach "$dir/kube-scheduler.log" "$dir/kube-scheduler.pid" "${run_env[@]}" "$dir/bin/kube-scheduler" \
  --kubeconfig="$dir/kubeconfig" --leader-elect=false \
  --bind-address=$lo --secure-port="$sched_port" --cert-dir="$dir/kube-scheduler-certs" --v=1
# Node and pod addresses are loopback: a controller that dials a pod IP (the OpenSandbox controller
# does, for tasks) reaches only this machine.
detach "$dir/kwok.log" "$dir/kwok.pid" "${run_env[@]}" "$dir/bin/kwok" \
  --kubeconfig="$dir/kubeconfig" --config="$here/kwok-stages.yaml" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-ip=127.0.2.1 --cidr=127.1.0.0/16 --node-lease-duration-seconds=40 --server-address="$lo:$kwok_port"

# --- 4. Flux -------------------------------------------------------------------------------------
# No --kubeconfig flag: KUBECONFIG (in run_env). Every listener on its own loopback port.
flux_env=("${run_env[@]}" RUNTIME_NAMESPACE=flux-system)
flux_flags=(--watch-all-namespaces=true --requeue-dependency=5s --log-level=info --log-encoding=console)
mkdir -p "$dir/flux-artifacts"
detach "$dir/source-controller.log" "$dir/source-controller.pid" "${flux_env[@]}" "$dir/bin/source-controller" \
  --storage-path="$dir/flux-artifacts" --storage-addr="$lo:$src_storage" --storage-adv-addr="$lo:$src_storage" \
  --metrics-addr="$lo:$src_metrics" --health-addr="$lo:$src_health" "${flux_flags[@]}"
detach "$dir/kustomize-controller.log" "$dir/kustomize-controller.pid" "${flux_env[@]}" "$dir/bin/kustomize-controller" \
  --metrics-addr="$lo:$ks_metrics" --health-addr="$lo:$ks_health" "${flux_flags[@]}"
detach "$dir/helm-controller.log" "$dir/helm-controller.pid" "${flux_env[@]}" "$dir/bin/helm-controller" \
  --metrics-addr="$lo:$hc_metrics" --health-addr="$lo:$hc_health" "${flux_flags[@]}"

# --- 5. the OpenSandbox controller, played ------------------------------------------------------
# No registry serves the real one (tests/played/opensandbox.rs says what is played and from which
# facts). It watches every namespace, as the real one, and waits quietly until the Pool CRD exists
# (a test installs it with the chart).
detach "$dir/played-opensandbox-controller.log" "$dir/played-opensandbox-controller.pid" "${run_env[@]}" \
  "$dir/bin/osbx-played" opensandbox-controller --kubeconfig="$dir/kubeconfig"

# --- 6. health -----------------------------------------------------------------------------------
wait_http() { # NAME URL [CURL-ARGS...]  (an answer 200 "ok"/anything, from a live process)
  local name=$1 url=$2 code pid
  shift 2
  pid=$(cat "$dir/$name.pid")
  while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@" "$url" || true)
    [ "$code" != 200 ] || return 0
    alive "$pid" || fail "$dir/$name.log" "$name exited during startup"
    [ $SECONDS -lt $deadline ] || fail "$dir/$name.log" "$name: no 200 from $url after ${timeout_s}s (last: $code)"
    sleep 0.1
  done
}
wait_http githttp "http://$lo:$git_port/healthz"
wait_http kube-controller-manager "https://$lo:$kcm_port/healthz" -k
wait_http kube-scheduler "https://$lo:$sched_port/healthz" -k
wait_http kwok "http://$lo:$kwok_port/healthz"
wait_http source-controller "http://$lo:$src_health/readyz"
wait_http kustomize-controller "http://$lo:$ks_health/readyz"
wait_http helm-controller "http://$lo:$hc_health/readyz"
alive "$(cat "$dir/played-opensandbox-controller.pid")" ||
  fail "$dir/played-opensandbox-controller.log" "the played OpenSandbox controller exited"

# --- controllers.env -----------------------------------------------------------------------------
{
  # Plain KEY=VALUE (shell-quoted only if a value has other characters than these).
  kv() { if [[ "$2" =~ ^[A-Za-z0-9_./:,=+@-]*$ ]]; then printf '%s=%s\n' "$1" "$2"; else printf '%s=%q\n' "$1" "$2"; fi; }
  kv KUBECONFIG "$dir/kubeconfig"
  kv K8S_BIN "$bin"
  kv GIT_HTTP_URL "http://$lo:$git_port"
  kv GIT_ROOT "$dir/git"
  kv STATIC_ROOT "$dir/static"
  kv STATIC_URL "http://$lo:$git_port/static"
  kv FLUX_STORAGE_ADDR "$lo:$src_storage"
  kv FLUX_STORAGE_PATH "$dir/flux-artifacts"
  kv FLUX_RUNTIME_NAMESPACE flux-system
  kv KWOK_NODE_ANNOTATION kwok.x-k8s.io/node=fake
  kv CONTROLLERS "$(IFS=,; echo "${controllers[*]}")"
  for c in "${controllers[@]}"; do
    k=$(echo "$c" | tr a-z- A-Z_)
    kv "${k}_PID_FILE" "$dir/$c.pid"
    kv "${k}_PID" "$(cat "$dir/$c.pid")"
    kv "${k}_LOG" "$dir/$c.log"
  done
  kv GITHTTP_HEALTH_URL "http://$lo:$git_port/healthz"
  kv KUBE_CONTROLLER_MANAGER_HEALTH_URL "https://$lo:$kcm_port/healthz"
  kv KUBE_SCHEDULER_HEALTH_URL "https://$lo:$sched_port/healthz"
  kv KWOK_HEALTH_URL "http://$lo:$kwok_port/healthz"
  kv SOURCE_CONTROLLER_HEALTH_URL "http://$lo:$src_health/readyz"
  kv KUSTOMIZE_CONTROLLER_HEALTH_URL "http://$lo:$ks_health/readyz"
  kv HELM_CONTROLLER_HEALTH_URL "http://$lo:$hc_health/readyz"
} >"$dir/controllers.env.tmp"
mv -f "$dir/controllers.env.tmp" "$dir/controllers.env"
log "controllers ready (${controllers[*]}); see $dir/controllers.env"
