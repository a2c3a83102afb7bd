package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// With --bootstrap-kubeconfig naming a missing file and no usable
// --kubeconfig, the start fails at once with upstream's wording, before it
// waits for a container runtime (here: none listens on the endpoint).
func TestBuildFailsAtOnceWithoutBootstrapKubeconfig(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, "unix://"+filepath.Join(dir, "no-runtime.sock"))
	opts.RootDir = filepath.Join(dir, "root")
	opts.CertDir = filepath.Join(dir, "pki")
	opts.Kubeconfig = filepath.Join(dir, "kubelet.conf")
	opts.BootstrapKubeconfig = filepath.Join(dir, "bootstrap-kubelet.conf")

	start := time.Now()
	_, err := build(context.Background(), opts, hostPaths{procSys: t.TempDir()})
	want := "unable to load bootstrap kubeconfig: stat " + opts.BootstrapKubeconfig + ": no such file or directory"
	if err == nil || err.Error() != want {
		t.Fatalf("build: %v, want %q", err, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("build took %s to fail; want at once (before the wait for the runtime)", d)
	}
}
