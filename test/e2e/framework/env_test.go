package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRigEnvFile(t *testing.T) {
	full := strings.Join([]string{
		"# comment",
		"RIG_DIR=/r",
		"NODE_NAME=n1",
		"KUBECONFIG=/r/admin.kubeconfig",
		`NODE_KUBECONFIG="/r/node.kubeconfig"`,
		"CONTAINER_RUNTIME_ENDPOINT=unix:///r/run/containerd.sock",
		"BUSYBOX_IMAGE=nodelet.local/busybox:latest",
		"export EXTRA='x=y'",
		"NODELET_PORT=11250",
		"CGROUP_ROOT=/nodelet-rig-conf",
		"",
	}, "\n")
	tests := []struct {
		name    string
		content string
		wantErr string
		check   func(t *testing.T, e *RigEnv)
	}{
		{
			name:    "full",
			content: full,
			check: func(t *testing.T, e *RigEnv) {
				if e.NodeKubeconfig != "/r/node.kubeconfig" {
					t.Errorf("NodeKubeconfig = %q (quotes not stripped?)", e.NodeKubeconfig)
				}
				if e.All["EXTRA"] != "x=y" {
					t.Errorf("EXTRA = %q, want x=y", e.All["EXTRA"])
				}
				if e.NodeletPort != 11250 || e.NodeletHealthzPort != 10248 {
					t.Errorf("ports = %d/%d, want 11250 and the default 10248", e.NodeletPort, e.NodeletHealthzPort)
				}
				if e.CgroupRoot != "/nodelet-rig-conf" {
					t.Errorf("CgroupRoot = %q, want /nodelet-rig-conf", e.CgroupRoot)
				}
				if e.NodeletRootBase != "/r/nodelet" {
					t.Errorf("NodeletRootBase default = %q", e.NodeletRootBase)
				}
			},
		},
		{name: "missing keys", content: "RIG_DIR=/r\n", wantErr: "missing"},
		{name: "not key value", content: full + "garbage\n", wantErr: "not KEY=value"},
		{name: "bad port", content: full + "NODELET_HEALTHZ_PORT=x\n", wantErr: "NODELET_HEALTHZ_PORT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "rig.env")
			if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			e, err := ParseRigEnvFile(p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRigEnvFile: %v", err)
			}
			tc.check(t, e)
		})
	}
}

func TestParseRigEnvFileMissingFile(t *testing.T) {
	if _, err := ParseRigEnvFile(filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "is the rig up") {
		t.Fatalf("err = %v, want a hint to run up.sh", err)
	}
}
