#!/usr/bin/env bash
# Print a benchmark profile whose namespaces start with $1 (e.g. `o` or `k`): the homelab layout
# with 60 pools; bench/templates adds 133 ConfigMaps, for 200 objects in all (BENCH_OBJECTS=N:
# N objects in all, the rest ConfigMaps too). BENCH_CHANGE=N changes the first N ConfigMaps.
set -euo pipefail
p=$1
cat <<YAML
apiVersion: osbx.dev/v1alpha1
kind: Profile
metadata: {name: bench-$p}
cluster: {name: bench-$p, fluxNamespace: $p-flux}
layers:
  - {name: opensandbox, component: opensandbox}
  - {name: opensandbox-pools, component: pools, dependsOn: [opensandbox]}
opensandbox:
  namespaces: {controlPlane: $p-system, sandbox: $p-sbx}
  source: {url: https://github.com/opensandbox-group/OpenSandbox.git, ref: {tag: helm/opensandbox/0.2.2}}
  release:
    install: {strategy: RetryOnFailure, retryInterval: 5m}
  server:
    apiKey: {secretRef: {name: api-key}}
    config: {runtime: {execdImage: example.com/execd:v1.0.22}, kubernetes: {sandboxCreateTimeoutSeconds: 180}}
  readme:
    notes: ["bench run ${BENCH_CHANGE:-0}", "configmaps $(( ${BENCH_OBJECTS:-200} - 67 ))"]
pools:
  defaults: {image: example.com/sandbox:v1, command: [sleep, infinity]}
  items:
YAML
for i in $(seq 1 60); do
  echo "    - {name: pool-$i, runtime: runc, capacity: {bufferMin: 0, bufferMax: 1, poolMin: 0, poolMax: 2}}"
done
