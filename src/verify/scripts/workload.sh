j() { printf '%s' "$1" | tr '\n\r\t' '   ' | tr -cd ' -~' | sed 's/\\/\\\\/g; s/"/\\"/g' | cut -c1-"${2:-300}"; }
up() { awk '{ printf "%d", $1 * 1000 }' /proc/uptime; }
path_of() { for p in $(echo "$PATH" | tr : ' '); do [ -x "$p/$1" ] && { echo "$p/$1"; return; }; done; }
d=/var/lib/docker
fs=$(stat -fc %t "$d" 2>/dev/null)
mnt=$(awk -v d="$d" '$2 == d { t = $3; s = $1 } END { print t " " s }' /proc/mounts)
kmsg=""
if [ -z "$SKIP_KIND" ]; then
  kmsg=present
  [ -c /dev/kmsg ] || { e=$(mknod /dev/kmsg c 1 11 2>&1) && kmsg=created || kmsg="missing: $e"; }
  cg=$(stat -fc %t /sys/fs/cgroup 2>/dev/null)
  ctl=$(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)
  cgw=false; mkdir /sys/fs/cgroup/osbx-probe-$$ 2>/dev/null && rmdir /sys/fs/cgroup/osbx-probe-$$ && cgw=true
  iw=$(cat /proc/sys/fs/inotify/max_user_watches 2>/dev/null); ii=$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null)
  inw=false; { echo "$iw" > /proc/sys/fs/inotify/max_user_watches && echo "$ii" > /proc/sys/fs/inotify/max_user_instances; } 2>/dev/null && inw=true
fi
net="--bridge=none --iptables=false --ip-masq=false --ip-forward=false"
[ -n "$KIND_NODE_IMAGE" ] && net=""
t0=$(up)
dockerd --data-root "$d" $net >/tmp/dockerd.log 2>&1 &
pid=$!
state=timeout
i=0
while [ $i -lt 90 ]; do
  if docker info >/dev/null 2>&1; then state=up; break; fi
  kill -0 $pid 2>/dev/null || { state=exited; break; }
  i=$((i + 1)); sleep 1
done
t1=$(up)
driver=""; dstatus=""; version=""; build=skipped; bms=0; blog=""; ran=""; kind=not-run; klog=""
if [ $state = up ]; then
  driver=$(docker info --format '{{.Driver}}' 2>&1)
  dstatus=$(docker info --format '{{json .DriverStatus}}' 2>&1)
  version=$(docker version --format '{{.Server.Version}}' 2>&1)
  c=/tmp/osbx-build
  mkdir -p $c/root
  sh=$(path_of busybox); [ -n "$sh" ] || sh=$(path_of sh)
  for f in "$sh" $(ldd "$sh" 2>/dev/null | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }'); do
    mkdir -p "$c/root$(dirname "$f")" && cp -L "$f" "$c/root$f"
  done
  x="\"$sh\""; [ "${sh##*/}" = busybox ] && x="\"$sh\", \"sh\""
  printf 'FROM scratch\nCOPY root/ /\nRUN [%s, "-c", "echo %s > /nonce"]\nCMD [%s, "-c", "read -r n < /nonce; echo $n"]\n' "$x" "$NONCE" "$x" >$c/Dockerfile
  b0=$(up)
  if blog=$(DOCKER_BUILDKIT=1 docker build --network=none -t osbx-probe:$NONCE $c 2>&1); then build=ok; else build=failed; fi
  bms=$(( $(up) - b0 ))
  [ $build = ok ] && ran=$(docker run --rm --network=none --pull=never osbx-probe:$NONCE 2>&1)
  if [ -n "$KIND_NODE_IMAGE" ] && [ -z "$SKIP_KIND" ]; then
    if [ -z "$(path_of kind)" ]; then kind="failed"; klog="no kind binary in the probe image"
    elif klog=$(kind create cluster --name osbx-probe --image "$KIND_NODE_IMAGE" --wait 120s 2>&1); then kind=created; klog=$(kind delete cluster --name osbx-probe 2>&1)
    else kind=failed; fi
  fi
fi
dlog=$(grep -E 'storage-driver=|graphdriver|level=fatal|failed to start daemon' /tmp/dockerd.log | grep -v AUFS | tail -n 3)
[ -n "$dlog" ] || dlog=$(tail -n 2 /tmp/dockerd.log)
[ $state = up ] && { kill $pid 2>/dev/null; wait $pid 2>/dev/null; }
line=$(printf '{"check":"workload","fs_magic":"%s","mount":"%s","kmsg":"%s","cgroup_magic":"%s","controllers":"%s","cgroup_writable":%s,"inotify_watches":"%s","inotify_instances":"%s","inotify_writable":%s,"dockerd":"%s","up_ms":%s,"version":"%s","driver":"%s","driver_status":"%s","dockerd_log":"%s","build":"%s","build_ms":%s,"build_log":"%s","ran":"%s","kind":"%s","kind_log":"%s"}' \
  "$(j "$fs")" "$(j "$mnt")" "$(j "$kmsg" 120)" "$(j "$cg")" "$(j "$ctl")" "${cgw:-false}" "$(j "$iw")" "$(j "$ii")" "${inw:-false}" \
  "$state" "$((t1 - t0))" "$(j "$version" 60)" "$(j "$driver" 60)" "$(j "$dstatus" 400)" "$(j "$dlog" 700)" "$build" "$bms" \
  "$(echo "$blog" | tail -n 6 | { b=$(cat); j "$b" 700; })" "$(j "$ran" 200)" "$kind" "$(j "$klog" 400)")
echo "$line" | tee /dev/termination-log
