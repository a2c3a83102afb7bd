package cgroups

import (
	"os"
	"strings"
	"testing"
)

func TestDriverFromRuntimeInfo(t *testing.T) {
	// Status(verbose=true).info["config"] of Debian's containerd 1.6.20 with
	// SystemdCgroup = true in the runc options (trimmed to the keys that matter; note the
	// legacy top-level systemdCgroup false).
	captured, err := os.ReadFile("testdata/containerd-1.6.20-status-config.json")
	if err != nil {
		t.Fatal(err)
	}
	realSystemd := string(captured)
	realCgroupfs := strings.Replace(realSystemd, `"SystemdCgroup": true`, `"SystemdCgroup": false`, 1)
	if realCgroupfs == realSystemd {
		t.Fatal("fixture has no SystemdCgroup option")
	}
	tests := []struct {
		name string
		info map[string]string
		want string
	}{
		{"containerd 1.6 SystemdCgroup true", map[string]string{"config": realSystemd}, "systemd"},
		{"containerd 1.6 SystemdCgroup false", map[string]string{"config": realCgroupfs}, "cgroupfs"},
		{"runc shim without options", map[string]string{"config": `{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":null}}}}`}, "cgroupfs"},
		{"default runtime is another one", map[string]string{"config": `{"containerd":{"defaultRuntimeName":"kata","runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","options":{"SystemdCgroup":true}},"kata":{"runtimeType":"io.containerd.kata.v2"}}}}`}, ""},
		{"default runtime missing", map[string]string{"config": `{"containerd":{"defaultRuntimeName":"crun","runtimes":{}}}`}, ""},
		{"no config", map[string]string{"golang": "go1.20"}, ""},
		{"not JSON", map[string]string{"config": "{"}, ""},
		{"nil info", nil, ""},
	}
	for _, tt := range tests {
		if got := DriverFromRuntimeInfo(tt.info); got != tt.want {
			t.Errorf("%s: DriverFromRuntimeInfo = %q, want %q", tt.name, got, tt.want)
		}
	}
}
