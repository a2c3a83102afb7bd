package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/cri/fakecri"
)

// The allocated resources of running pods cannot be guessed: a checkpoint
// that does not read back stops the start, naming the file, as upstream.
func TestCorruptAllocationCheckpointStopsStart(t *testing.T) {
	rt := fakecri.New(t)
	opts := testOptions(t, rt.Endpoint())
	opts.Config.ShutdownGracePeriod = metav1.Duration{}
	opts.Config.ShutdownGracePeriodCriticalPods = metav1.Duration{}
	path := filepath.Join(opts.RootDir, allocation.AllocatedStateFile)
	if err := os.WriteFile(path, []byte(`{"data":"{}","checksum":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, kt := range kernelTunables() {
		want[kt.name] = kt.want
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := build(ctx, opts, hostPaths{procSys: tempProcSys(t, want, "")})
	if err == nil {
		a.close(ctx)
		t.Fatal("nodelet started on a corrupted allocation checkpoint")
	}
	if !strings.Contains(err.Error(), "please drain this node and delete pod resource information checkpoint file") || !strings.Contains(err.Error(), path) {
		t.Fatalf("error = %v", err)
	}
}
