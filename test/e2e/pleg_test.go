//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// plegKills is how many containers each mode kills.
const plegKills = 10

// TestEventedPLEG (issue 19): containers killed from outside nodelet (SIGKILL of
// their process) show as terminated in the pod status, with the generic PLEG
// (1 s relist) and with the EventedPLEG gate (containerd's event stream). It logs
// the kill → API status latencies of both; with EventedPLEG it checks that the
// relist runs at the long period (no periodic relist over a quiet spell, from
// kubelet_pleg_relist_duration_seconds_count) and that the stream connected.
// The latencies are figures, not asserted.
func TestEventedPLEG(t *testing.T) {
	var figures []string
	for _, evented := range []bool{false, true} {
		mode := map[bool]string{false: "generic", true: "evented"}[evented]
		t.Run(mode, func(t *testing.T) {
			lat := killLatencies(t, evented)
			slices.Sort(lat)
			var ms []string
			for _, d := range lat {
				ms = append(ms, strconv.FormatInt(d.Milliseconds(), 10))
			}
			figures = append(figures, fmt.Sprintf("%s PLEG: kill → pod status p50 %v, max %v over %d kills (ms: %s)",
				mode, lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat), strings.Join(ms, " ")))
		})
	}
	for _, f := range figures {
		t.Log(f)
	}
}

// killLatencies starts nodelet (EventedPLEG on or off), runs plegKills pods,
// kills each one's container and returns how long each kill took to reach the
// pod's status in the API server.
func killLatencies(t *testing.T, evented bool) []time.Duration {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		if evented {
			c.FeatureGates = map[string]bool{"EventedPLEG": true}
		}
	}})
	for i := range plegKills {
		p := f.BusyboxPod(ns, fmt.Sprintf("victim-%d", i), "sleep", "3600")
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		f.CreatePod(ctx, p)
	}
	for i := range plegKills {
		f.WaitForPodPhase(ctx, ns, fmt.Sprintf("victim-%d", i), v1.PodRunning, 2*time.Minute)
	}

	// A quiet spell: no pod changes, so only the periodic relist runs.
	const quiet = 6 * time.Second
	before := relistCount(t, ctx, f)
	time.Sleep(quiet)
	relists := relistCount(t, ctx, f) - before
	t.Logf("relists during %v without changes: %v", quiet, relists)
	if evented {
		if relists > 1 {
			t.Errorf("%v relists in %v of quiet with EventedPLEG; want the %v period", relists, quiet, "300s")
		}
		m := nodeMetrics(t, ctx, f)
		if v := metricValue(m, "kubelet_evented_pleg_connection_success_count"); v < 1 {
			t.Errorf("kubelet_evented_pleg_connection_success_count = %v, want the stream connected", v)
		}
		if logs := n.Logs(); strings.Contains(logs, "Fall back to Generic PLEG relisting") {
			t.Errorf("the evented PLEG fell back to relisting:\n%s", grepLines(logs, "PLEG"))
		}
	}

	var lat []time.Duration
	for i := range plegKills {
		// Each kill on a quiet node (the last victim's teardown relists too),
		// at a phase of the relist period a tenth further on than the last.
		time.Sleep(2*time.Second + time.Duration(i)*time.Second/plegKills)
		lat = append(lat, f.KillAndWatch(ctx, ns, fmt.Sprintf("victim-%d", i)))
	}
	if evented {
		// How much of it is the runtime's event delivery. containerd replays
		// the last five minutes of events to a new subscriber (the previous
		// subtest's pods): those arrive late and are dropped.
		m := nodeMetrics(t, ctx, f)
		const name = "kubelet_evented_pleg_connection_latency_seconds"
		t.Logf("runtime events reaching nodelet within 10ms: %v, 100ms: %v, of %v (%s; the rest replayed by containerd at subscription)",
			metricValue(m, name+`_bucket{le="0.01"}`), metricValue(m, name+`_bucket{le="0.1"}`), metricValue(m, name+"_count"), name)
	}
	return lat
}

func nodeMetrics(t *testing.T, ctx context.Context, f *framework.Framework) string {
	t.Helper()
	return mustKubectl(t, ctx, f, "get", "--raw", "/api/v1/nodes/"+f.Env.NodeName+"/proxy/metrics")
}

// relistCount is kubelet_pleg_relist_duration_seconds_count: how many relists ran.
func relistCount(t *testing.T, ctx context.Context, f *framework.Framework) float64 {
	t.Helper()
	m := nodeMetrics(t, ctx, f)
	v := metricValue(m, "kubelet_pleg_relist_duration_seconds_count")
	if v < 0 {
		t.Fatalf("/metrics has no kubelet_pleg_relist_duration_seconds_count:\n%s", grepLines(m, "pleg"))
	}
	return v
}

// metricValue is the value of a series (name with its labels as exposed) in a
// Prometheus text exposition, -1 when absent.
func metricValue(exposition, name string) float64 {
	for _, l := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}
