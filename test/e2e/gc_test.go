//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestContainerGCKeepsOneDeadContainer lets a container crash a few times, then waits
// for container GC (every minute, as upstream) to leave at most one dead instance
// (maximum-dead-containers-per-container = 1) next to the current one.
func TestContainerGCKeepsOneDeadContainer(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	f.CreatePod(ctx, f.BusyboxPod(ns, "crasher", "sh", "-c", "exit 1"))
	var uid string
	err := framework.WaitFor(ctx, 2*time.Minute, "three restarts", func(ctx context.Context) (bool, error) {
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "crasher", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, err
		}
		uid = string(p.UID)
		return p.Status.ContainerStatuses[0].RestartCount >= 3, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = framework.WaitFor(ctx, 100*time.Second, "container GC to leave one dead container", func(ctx context.Context) (bool, error) {
		list, err := f.CRI.PodContainers(ctx, uid)
		if err != nil {
			return false, err
		}
		dead := 0
		for _, c := range list {
			if c.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				dead++
			}
		}
		return dead <= 2 && len(list) <= 2, nil // one kept dead instance, plus the current one (running or just exited)
	})
	if err != nil {
		list, _ := f.CRI.PodContainers(ctx, uid)
		t.Fatalf("%v: %d containers", err, len(list))
	}
	t.Logf("container GC trimmed the crash-looping pod's containers %.1fs after the third restart", time.Since(start).Seconds())
	if !strings.Contains(n.Logs(), "Removing dead container") {
		t.Errorf("nodelet log does not show container GC removing containers")
	}
	p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "crasher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// GC must not lose what the status reports: the restart count keeps growing.
	if cs := p.Status.ContainerStatuses[0]; cs.RestartCount < 3 || cs.LastTerminationState.Terminated == nil {
		t.Errorf("after GC the container status lost its history: %+v", cs)
	}
}
