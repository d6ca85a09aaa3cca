#!/usr/bin/env bash
# End-to-end smoke of the real OpenSandbox server (tests/opensandbox/serve) in pool mode against a
# throwaway control plane (tests/cluster/up), with this script playing the OpenSandbox controller
# by hand through the Kubernetes API (there is no kubelet, scheduler or controller-manager).
#
#   tests/opensandbox/smoke.sh [WORKDIR]
#
# Prints a transcript (requests, responses, the BatchSandbox as the server created it and as the
# stand-in left it) and "N passed, N failed" at the end; exit 0 only if every check passed.
# Everything it starts (plane, server, stand-in loop) is stopped on exit; WORKDIR (default: a new
# mktemp dir) keeps the logs. Takes ~20 s plus a one-off venv build.
# Env: OSBX_OPENSANDBOX_CRDS (dir with the OpenSandbox CRD YAMLs, default ../shared/crds/opensandbox
# next to the repository), SMOKE_MISSING_POOL=0 skips the missing-pool check (costs the create
# timeout, 6 s here).
#
# The stand-in controller (function standin_once) does, for every BatchSandbox whose spec.poolRef
# names a Pool it manages, what the real pool/batchsandbox controllers do:
#   allocate: merge-patch metadata {finalizers += pool.sandbox.opensandbox.io/pool-allocation,
#             annotations: sandbox.opensandbox.io/alloc-status={"pods":[POD]},
#             sandbox.opensandbox.io/endpoints=["POD_IP"]}, then status subresource
#             {observedGeneration, replicas:1, allocated:1, ready:1, task*:0}, then Pool status.
#   release:  once deletionTimestamp is set: force-delete the pod (recycleStrategy Delete; without
#             a kubelet a graceful delete never finishes), JSON-patch away the finalizers, recreate
#             an idle pod, update Pool status.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/osbx-opensandbox-smoke.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd -P)
crds=${OSBX_OPENSANDBOX_CRDS:-$root/../shared/crds/opensandbox}
ns=opensandbox
pool=ci-pod
api_key=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
export OPENSANDBOX_SERVER_API_KEY=$api_key

pass=0 failn=0
say() { echo "== $*"; }
check() { # DESCRIPTION EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then pass=$((pass + 1)); echo "ok   - $1"; else failn=$((failn + 1)); echo "FAIL - $1: expected [$2], got [$3]"; fi
}

standin_pid=
cleanup() {
  [ -z "$standin_pid" ] || kill "$standin_pid" 2>/dev/null || true
  "$here/stop" "$work/server" >/dev/null 2>&1 || true
  "$root/tests/cluster/down" "$work/plane" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- plane, CRDs, namespace, Pool ----------------------------------------------------------------
bin=$("$root/tests/cluster/build" plane)
kc=$("$root/tests/cluster/up" --watch-pid $$ "$work/plane" 2>"$work/plane-up.log" | tail -n1)
k() { "$bin/kubectl" --kubeconfig "$kc" "$@"; }
k apply --server-side -f "$crds" >/dev/null
k wait --for condition=Established crd/pools.sandbox.opensandbox.io crd/batchsandboxes.sandbox.opensandbox.io --timeout=30s >/dev/null
k create namespace "$ns" >/dev/null

k apply -n "$ns" -f - >/dev/null <<EOF
apiVersion: sandbox.opensandbox.io/v1alpha1
kind: Pool
metadata:
  name: $pool
spec:
  capacitySpec: {bufferMax: 1, bufferMin: 1, poolMax: 2, poolMin: 1}
  template:
    metadata:
      labels: {app: $pool}
    spec:
      containers:
      - name: sandbox
        image: busybox:1.36
        command: ["sleep", "infinity"]
EOF
pool_uid=$(k get pool -n "$ns" "$pool" -o jsonpath='{.metadata.uid}')
revision=0123abcd
echo 0 >"$work/pod_seq" # a file, not a variable: make_pod also runs inside the stand-in's subshells

# A Ready, Running pool pod with an IP (what pool controller + scheduler + kubelet would produce).
make_pod() { # -> prints "NAME IP"
  local name ip now pod_seq
  pod_seq=$(( $(cat "$work/pod_seq") + 1 ))
  echo "$pod_seq" >"$work/pod_seq"
  name=$pool-p$pod_seq
  ip=10.244.0.$((9 + pod_seq))
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  k create -n "$ns" -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels: {app: $pool, sandbox.opensandbox.io/pool-name: $pool, sandbox.opensandbox.io/pool-revision: "$revision"}
  ownerReferences:
  - {apiVersion: sandbox.opensandbox.io/v1alpha1, kind: Pool, name: $pool, uid: $pool_uid, controller: true, blockOwnerDeletion: true}
spec:
  nodeName: fake-node-0
  containers:
  - name: sandbox
    image: busybox:1.36
    command: ["sleep", "infinity"]
EOF
  k patch pod -n "$ns" "$name" --subresource=status --type=merge -p "$(cat <<EOF
{"status":{"phase":"Running","podIP":"$ip","podIPs":[{"ip":"$ip"}],"hostIP":"192.0.2.10","startTime":"$now",
 "conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"$now"},
               {"type":"Initialized","status":"True","lastTransitionTime":"$now"},
               {"type":"ContainersReady","status":"True","lastTransitionTime":"$now"},
               {"type":"Ready","status":"True","lastTransitionTime":"$now"}],
 "containerStatuses":[{"name":"sandbox","ready":true,"started":true,"restartCount":0,"image":"busybox:1.36","imageID":"",
                       "state":{"running":{"startedAt":"$now"}}}]}}
EOF
)" >/dev/null
  echo "$name $ip"
}
pool_status() { # ALLOCATED AVAILABLE TOTAL
  k patch pool -n "$ns" "$pool" --subresource=status --type=merge \
    -p "{\"status\":{\"observedGeneration\":1,\"total\":$3,\"allocated\":$1,\"available\":$2,\"revision\":\"$revision\"}}" >/dev/null
}
make_pod >/dev/null
pool_status 0 1 1

# --- stand-in controller -------------------------------------------------------------------------
release_delay=${SMOKE_RELEASE_DELAY:-2} # seconds a deleted sandbox stays Terminating (to observe it)
standin_once() {
  local line name pref dts alloc fin gen pod ip idle
  k get batchsandboxes -n "$ns" -o jsonpath='{range .items[*]}{.metadata.name}{"|"}{.spec.poolRef}{"|"}{.metadata.deletionTimestamp}{"|"}{.metadata.annotations.sandbox\.opensandbox\.io/alloc-status}{"|"}{.metadata.finalizers}{"|"}{.metadata.generation}{"\n"}{end}' |
  while IFS='|' read -r name pref dts alloc fin gen; do # '|' not tab: IFS whitespace would merge empty fields
    [ "$pref" = "$pool" ] || continue
    if [ -z "$dts" ] && [ -z "$alloc" ]; then
      k get batchsandbox -n "$ns" "$name" -o json >"$work/bsbx-$name.created.json"
      idle=$(k get pods -n "$ns" -l "sandbox.opensandbox.io/pool-name=$pool" -o jsonpath='{range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}' |
        while read -r pod ip; do grep -qx "$pod" "$work/allocated" 2>/dev/null || { echo "$pod $ip"; break; }; done)
      [ -n "$idle" ] || continue # pool exhausted: leave it Pending like the real controller
      read -r pod ip <<<"$idle"
      echo "$pod" >>"$work/allocated"
      echo "$name $pod" >>"$work/allocations"
      k patch batchsandbox -n "$ns" "$name" --type=merge -p "{\"metadata\":{\"finalizers\":[\"pool.sandbox.opensandbox.io/pool-allocation\"],\"annotations\":{\"sandbox.opensandbox.io/alloc-status\":\"{\\\"pods\\\":[\\\"$pod\\\"]}\",\"sandbox.opensandbox.io/endpoints\":\"[\\\"$ip\\\"]\"}}}" >/dev/null
      k patch batchsandbox -n "$ns" "$name" --subresource=status --type=merge -p "{\"status\":{\"observedGeneration\":$gen,\"replicas\":1,\"allocated\":1,\"ready\":1,\"taskRunning\":0,\"taskSucceed\":0,\"taskFailed\":0,\"taskPending\":0,\"taskUnknown\":0}}" >/dev/null
      pool_status 1 0 1
      echo "standin: $(date +%T.%N | cut -c1-12) allocated $pod ($ip) to $name"
    elif [ -n "$dts" ] && [[ "$fin" == *pool.sandbox.opensandbox.io/pool-allocation* ]]; then
      [ -f "$work/releasing-$name" ] || { date +%s >"$work/releasing-$name"; continue; }
      [ $(( $(date +%s) - $(cat "$work/releasing-$name") )) -ge "$release_delay" ] || continue
      pod=$(awk -v n="$name" '$1 == n { print $2 }' "$work/allocations")
      [ -z "$pod" ] || k delete pod -n "$ns" "$pod" --grace-period=0 --force >/dev/null 2>&1 || true
      k patch batchsandbox -n "$ns" "$name" --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null
      make_pod >/dev/null
      pool_status 0 1 1
      echo "standin: $(date +%T.%N | cut -c1-12) released $pod from $name, removed finalizer"
    fi
  done
}
( while :; do standin_once || true; sleep 0.2; done ) >"$work/standin.log" 2>&1 &
standin_pid=$!

# --- server --------------------------------------------------------------------------------------
t0=$(date +%s.%N)
OSBX_OPENSANDBOX_CREATE_TIMEOUT=${OSBX_OPENSANDBOX_CREATE_TIMEOUT:-6} \
  "$here/serve" --watch-pid $$ "$work/server" "$kc" "$ns" >"$work/serve.out" 2>"$work/serve.err" ||
  { cat "$work/serve.err"; exit 1; }
url=$(tail -n1 "$work/serve.out")
say "server $url ready in $(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)") s (incl. venv check), RSS $(ps -o rss= -p "$(cat "$work/server/server.pid")") KiB"

# --- HTTP checks ---------------------------------------------------------------------------------
code= body=
req() { # METHOD PATH [BODY] [noauth|badauth]  -> sets code, body; prints the exchange
  local m=$1 p=$2 d=${3:-} a=${4:-} hdr=() out
  case "$a" in
    noauth) ;;
    badauth) hdr=(-H "OPEN-SANDBOX-API-KEY: wrong-key") ;;
    *) hdr=(-H "OPEN-SANDBOX-API-KEY: $api_key") ;;
  esac
  [ -z "$d" ] || hdr+=(-H 'Content-Type: application/json' --data "$d")
  out=$(curl -s -X "$m" "${hdr[@]}" -w '\n%{http_code} %{time_total}' --max-time 60 "$url$p")
  body=$(sed '$d' <<<"$out")
  code=$(tail -n1 <<<"$out" | cut -d' ' -f1)
  echo "> $m $p${a:+ ($a)}${d:+ $d}"
  echo "< $code ($(tail -n1 <<<"$out" | cut -d' ' -f2)s) $body"
}
field() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); [d := d[k] for k in sys.argv[2].split(".")]; print(d)' "$1" "$2" 2>/dev/null || true; }

say "health + auth"
req GET /health "" noauth;                                  check "GET /health" 200 "$code"
req POST /v1/sandboxes '{"extensions":{"poolRef":"ci-pod"}}' noauth; check "POST without key -> 401" 401 "$code"
check "401 code MISSING_API_KEY" MISSING_API_KEY "$(field "$body" code)"
req POST /v1/sandboxes '{"extensions":{"poolRef":"ci-pod"}}' badauth; check "POST with wrong key -> 401" 401 "$code"
check "401 code INVALID_API_KEY" INVALID_API_KEY "$(field "$body" code)"

say "create (pool mode)"
req POST /v1/sandboxes '{"extensions":{"poolRef":"ci-pod"},"entrypoint":["tail","-f","/dev/null"],"timeout":600,"metadata":{"osbx-smoke":"r1"}}'
check "create -> 202" 202 "$code"
check "create state Running" Running "$(field "$body" status.state)"
id=$(field "$body" id)
echo "-- BatchSandbox as the server created it:"
python3 -m json.tool "$work/bsbx-$id.created.json" 2>/dev/null | sed -n '/"metadata"/,$p' || echo "(not captured)"
check "spec.poolRef" ci-pod "$(k get batchsandbox -n "$ns" "$id" -o jsonpath='{.spec.poolRef}')"
check "label opensandbox.io/id" "$id" "$(k get batchsandbox -n "$ns" "$id" -o jsonpath='{.metadata.labels.opensandbox\.io/id}')"
check "no taskTemplate" "" "$(k get batchsandbox -n "$ns" "$id" -o jsonpath='{.spec.taskTemplate}')"

say "read"
req GET "/v1/sandboxes/$id";                                 check "GET -> 200" 200 "$code"
check "GET state Running" Running "$(field "$body" status.state)"
check "GET reason POD_READY_WITH_IP" POD_READY_WITH_IP "$(field "$body" status.reason)"
req GET "/v1/sandboxes?metadata=osbx-smoke%3Dr1";            check "list by metadata -> 200" 200 "$code"
check "list totalItems" 1 "$(field "$body" pagination.totalItems)"
req GET "/v1/sandboxes/$id/endpoints/44772";                 check "endpoint -> 200" 200 "$code"
check "endpoint = podIP:port" 10.244.0.10:44772 "$(field "$body" endpoint)"

say "delete"
req DELETE "/v1/sandboxes/$id";                              check "DELETE -> 204" 204 "$code"
echo "-- right after DELETE: deletionTimestamp=$(k get batchsandbox -n "$ns" "$id" -o jsonpath='{.metadata.deletionTimestamp}' 2>&1) finalizers=$(k get batchsandbox -n "$ns" "$id" -o jsonpath='{.metadata.finalizers}' 2>&1)"
req GET "/v1/sandboxes/$id";                                 check "GET while Terminating -> 200 (server ignores deletionTimestamp)" 200 "$code"
gone=
for _ in $(seq 1 100); do
  if ! k get batchsandbox -n "$ns" "$id" >/dev/null 2>&1; then gone=1; break; fi
  sleep 0.1
done
check "BatchSandbox gone after stand-in removed the finalizer" 1 "$gone"
req GET "/v1/sandboxes/$id";                                 check "GET after release -> 404" 404 "$code"
check "404 code" KUBERNETES::SANDBOX_NOT_FOUND "$(field "$body" code)"
req DELETE "/v1/sandboxes/$id";                              check "DELETE again -> 404" 404 "$code"

say "validation"
req POST /v1/sandboxes '{"extensions":{"poolRef":"ci-pod"},"timeout":600}'
check "pool mode without entrypoint -> 500 (0.1.14 bug)" 500 "$code"
req POST /v1/sandboxes '{"extensions":{"poolRef":"ci-pod"},"entrypoint":["tail","-f","/dev/null"],"timeout":30}'
check "timeout < 60 -> 422" 422 "$code"

if [ "${SMOKE_MISSING_POOL:-1}" != 0 ]; then
  say "missing pool"
  req POST /v1/sandboxes '{"extensions":{"poolRef":"no-such-pool"},"entrypoint":["tail","-f","/dev/null"],"timeout":600}'
  check "missing pool -> 504 after sandbox_create_timeout_seconds" 504 "$code"
  check "504 code" KUBERNETES::POD_READY_TIMEOUT "$(field "$body" code)"
  check "BatchSandbox cleaned up" "" "$(k get batchsandboxes -n "$ns" -o jsonpath='{.items[*].metadata.name}')"
fi

echo "-- stand-in log:"; cat "$work/standin.log"
echo "-- server RSS now: $(ps -o rss= -p "$(cat "$work/server/server.pid")") KiB; logs in $work"
echo "$pass passed, $failn failed"
[ "$failn" = 0 ]
