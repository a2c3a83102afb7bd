package pleg

import (
	"context"
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type benchPod struct {
	uid, sandbox string
	churn        string // ID of the container that churns
	attempt      uint32
}

// setupBench starts 100 pods with 2 running containers each and does the first
// (full) relist, so the timed relists are steady state.
func setupBench(b *testing.B, opts ...Option) (*harness, []*benchPod) {
	h := newHarness(b, append([]Option{WithEventCapacity(1 << 20)}, opts...)...)
	pods := make([]*benchPod, 100)
	for i := range pods {
		uid := fmt.Sprintf("pod-%03d", i)
		sb := h.runPod(uid)
		h.createContainer(sb, uid, "main", 0, true)
		pods[i] = &benchPod{uid: uid, sandbox: sb, churn: h.createContainer(sb, uid, "side", 0, true)}
	}
	h.pleg.Relist(context.Background())
	h.drain()
	return h, pods
}

// BenchmarkRelist measures one relist of 100 pods × 2 containers over real
// gRPC to the fake runtime: with nothing changed, and with 10% of the pods
// changing between relists (a container exits, or is replaced by a new one).
// The latency variants add 1ms to every status call, as a loaded runtime
// would, to show what bounded parallel inspection buys over serial.
func BenchmarkRelist(b *testing.B) {
	ctx := context.Background()

	b.Run("steady", func(b *testing.B) {
		h, _ := setupBench(b)
		b.ReportAllocs()
		for b.Loop() {
			h.pleg.Relist(ctx)
		}
		if evs := h.drain(); len(evs) != 0 {
			b.Fatalf("steady state produced %d events", len(evs))
		}
	})

	b.Run("churn10pct", func(b *testing.B) { benchChurn(b, 0) })
	for _, par := range []int{1, 4} {
		b.Run(fmt.Sprintf("churn10pct-latency1ms-parallel%d", par), func(b *testing.B) {
			benchChurn(b, time.Millisecond, WithInspectParallelism(par))
		})
	}
}

func benchChurn(b *testing.B, latency time.Duration, opts ...Option) {
	ctx := context.Background()
	h, pods := setupBench(b, opts...)
	h.fake.SetDelay("PodSandboxStatus", latency)
	h.fake.SetDelay("ContainerStatus", latency)
	next := 0
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for range 10 {
			p := pods[next%len(pods)]
			next++
			churn(b, h, p)
		}
		h.drain()
		b.StartTimer()
		h.pleg.Relist(ctx)
	}
}

// churn alternates a pod's side container between exiting and being replaced.
func churn(b *testing.B, h *harness, p *benchPod) {
	st, err := h.cli.ContainerStatus(context.Background(), p.churn, false)
	if err != nil {
		b.Fatal(err)
	}
	if st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
		h.fake.ExitContainer(p.churn, 0, "")
		return
	}
	if err := h.cli.RemoveContainer(context.Background(), p.churn); err != nil {
		b.Fatal(err)
	}
	p.attempt++
	p.churn = h.createContainer(p.sandbox, p.uid, "side", p.attempt, true)
}
