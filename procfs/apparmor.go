package procfs

import (
	"os"
	"path/filepath"
)

// AppArmorEnabled reports whether the kernel enforces AppArmor, as runc (and
// so upstream's kubelet) decides it: securityfs has an apparmor directory and
// the module's "enabled" parameter starts with Y. sys is the sysfs mount
// point, /sys outside tests.
func AppArmorEnabled(sys string) bool {
	if _, err := os.Stat(filepath.Join(sys, "kernel", "security", "apparmor")); err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(sys, "module", "apparmor", "parameters", "enabled"))
	return err == nil && len(b) > 1 && b[0] == 'Y'
}
