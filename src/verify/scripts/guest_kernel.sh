k=$(uname -r)
m=false; grep -q 'systemd.unit=kata-containers.target' /proc/cmdline && m=true
h=false; grep -qw hypervisor /proc/cpuinfo && h=true
a=$(tr ' ' '\n' </proc/cmdline | grep '^agent\.' | tr -d '"\\' | tr '\n' ' ')
mem=$(awk '/MemTotal/ {print $2}' /proc/meminfo)
line=$(printf '{"check":"kata.guest-kernel","kernel":"%s","cmdline_marker":%s,"hypervisor":%s,"agent_params":"%s","mem_kib":%s}' "$k" "$m" "$h" "${a% }" "${mem:-0}")
echo "$line" | tee /dev/termination-log
