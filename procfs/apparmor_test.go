package procfs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAppArmorEnabled(t *testing.T) {
	tests := []struct {
		name       string
		securityfs bool
		enabled    string // "": no parameter file
		want       bool
	}{
		{name: "no AppArmor at all"},
		{name: "enabled", securityfs: true, enabled: "Y\n", want: true},
		{name: "module loaded but disabled", securityfs: true, enabled: "N\n"},
		{name: "parameter without securityfs", enabled: "Y\n"},
		{name: "securityfs without the parameter", securityfs: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys := t.TempDir()
			if tt.securityfs {
				if err := os.MkdirAll(filepath.Join(sys, "kernel", "security", "apparmor"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tt.enabled != "" {
				dir := filepath.Join(sys, "module", "apparmor", "parameters")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "enabled"), []byte(tt.enabled), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := AppArmorEnabled(sys); got != tt.want {
				t.Errorf("AppArmorEnabled = %v, want %v", got, tt.want)
			}
		})
	}
}
