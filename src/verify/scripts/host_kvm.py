import json, os, stat, fcntl
r = {"check": "kata.host-kvm"}
try:
    st = os.stat("/dev/kvm")
    r["char_device"] = stat.S_ISCHR(st.st_mode)
    fd = os.open("/dev/kvm", os.O_RDWR)
    r["api_version"] = fcntl.ioctl(fd, 0xAE00)
    try:
        vm = fcntl.ioctl(fd, 0xAE01, 0)
        os.close(vm)
        r["create_vm"] = True
    except OSError as e:
        r["create_vm"] = False
        r["create_vm_error"] = str(e)
    os.close(fd)
except OSError as e:
    r["error"] = str(e)
for m in ("kvm_intel", "kvm_amd", "kvm_pvm"):
    if os.path.isdir("/sys/module/" + m):
        r["module"] = m
        p = "/sys/module/%s/parameters/nested" % m
        if os.path.exists(p):
            r["nested"] = open(p).read().strip()
try:
    r["vhost_vsock"] = stat.S_ISCHR(os.stat("/dev/vhost-vsock").st_mode)
except OSError:
    r["vhost_vsock"] = False
try:
    r["host_is_vm"] = " hypervisor" in open("/proc/cpuinfo").read()
except OSError:
    pass
line = json.dumps(r, separators=(",", ":"))
open("/dev/termination-log", "w").write(line)
print(line)
