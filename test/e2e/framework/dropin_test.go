package framework

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDropInCommandLine(t *testing.T) {
	dir := t.TempDir()
	flags := filepath.Join(dir, "kubeadm-flags.env")
	if err := os.WriteFile(flags, []byte("KUBELET_KUBEADM_ARGS=\"--hostname-override=n1 --v=2\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(extra, []byte("# comment\nKUBELET_EXTRA_ARGS='--node-ip=10.0.0.1'\nKUBELET_CONFIG_ARGS=--config=/other.yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := `# a drop-in
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/b.conf --kubeconfig=/k.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/c.yaml" "UNUSED=x"
EnvironmentFile=-` + flags + `
EnvironmentFile=-` + filepath.Join(dir, "missing") + `
EnvironmentFile=-` + extra + `
ExecStart=/usr/bin/first
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS $UNSET
`
	d, err := ParseDropIn(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Env) != 3 || d.Env[2] != [2]string{"UNUSED", "x"} {
		t.Errorf("Environment= %q", d.Env)
	}
	args, env, err := d.CommandLine("/tmp/bin/kubelet")
	if err != nil {
		t.Fatal(err)
	}
	// An EnvironmentFile= wins over Environment=, as in systemd.
	want := []string{"/tmp/bin/kubelet", "--bootstrap-kubeconfig=/b.conf", "--kubeconfig=/k.conf", "--config=/other.yaml",
		"--hostname-override=n1", "--v=2", "--node-ip=10.0.0.1"}
	if !slices.Equal(args, want) {
		t.Errorf("argv\n got %q\nwant %q", args, want)
	}
	if env["KUBELET_EXTRA_ARGS"] != "--node-ip=10.0.0.1" {
		t.Errorf("env %v", env)
	}
}

func TestDropInRefusals(t *testing.T) {
	for _, tc := range []struct{ name, text, parseErr, cmdErr string }{
		{"no ExecStart", "[Service]\nEnvironment=A=b\n", "no ExecStart", ""},
		{"reset only", "[Service]\nExecStart=/bin/a\nExecStart=\n", "no ExecStart", ""},
		{"continuation", "[Service]\nExecStart=/bin/a \\\n  --b\n", "continuation", ""},
		{"not key=value", "[Service]\nbogus\n", "not Key=value", ""},
		{"unterminated quote", "[Service]\nEnvironment=\"A=b\nExecStart=/bin/a\n", "unterminated", ""},
		{"braces", "[Service]\nExecStart=/bin/a ${A}\n", "", "whole-word $NAME"},
		{"inside a word", "[Service]\nExecStart=/bin/a --x=$A\n", "", "whole-word $NAME"},
		{"quoted", "[Service]\nExecStart=/bin/a \"--x y\"\n", "", "quoting"},
		{"prefix", "[Service]\nExecStart=-/bin/a\n", "", "prefixes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseDropIn(tc.text)
			if tc.parseErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.parseErr) {
					t.Fatalf("ParseDropIn: %v, want %q", err, tc.parseErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := d.CommandLine("/x"); err == nil || !strings.Contains(err.Error(), tc.cmdErr) {
				t.Fatalf("CommandLine: %v, want %q", err, tc.cmdErr)
			}
		})
	}
}

func TestDropInRequiredEnvFileMissing(t *testing.T) {
	d, err := ParseDropIn("[Service]\nEnvironmentFile=/nonexistent/env\nExecStart=/bin/a $A\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.CommandLine("/x"); err == nil {
		t.Fatal("a missing EnvironmentFile= without '-' was accepted")
	}
}
