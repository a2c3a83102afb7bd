#!/bin/bash
# placeholder
set -x
echo "boot $(cut -d' ' -f1 /proc/uptime)" > /vm/out/guest-timings.txt
cat /proc/cmdline; stat -fc %T /sys/fs/cgroup; cat /sys/fs/cgroup/cgroup.controllers; cat /proc/self/cgroup; systemctl list-units --no-pager | head -40 ; systemd-analyze --no-pager || true
touch /vm/out/done
