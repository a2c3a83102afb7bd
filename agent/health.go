package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// runtimeStatuser is the CRI call runtime health needs.
type runtimeStatuser interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// runtimeHealth polls the runtime's Status every 5s, as upstream's updateRuntimeUp,
// and remembers why it is not ready (feeds the node's Ready condition).
type runtimeHealth struct {
	rt    runtimeStatuser
	clock clock.WithTicker

	mu      sync.Mutex
	lastErr error
	checked bool
	// handlers are the runtime handlers of the last Status that answered
	// (upstream's runtimeState.runtimeHandlers); handlersSet once one did.
	handlers    []*runtimeapi.RuntimeHandler
	handlersSet bool
}

func newRuntimeHealth(rt runtimeStatuser, clk clock.WithTicker) *runtimeHealth {
	return &runtimeHealth{rt: rt, clock: clk}
}

func (h *runtimeHealth) run(ctx context.Context) {
	t := h.clock.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		h.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

func (h *runtimeHealth) check(ctx context.Context) {
	resp, err := h.rt.Status(ctx, false)
	var problem error
	if err != nil {
		problem = fmt.Errorf("container runtime is down: %w", err)
	} else {
		var bad []string
		for _, c := range resp.GetStatus().GetConditions() {
			if (c.Type == "RuntimeReady" || c.Type == "NetworkReady") && !c.Status {
				bad = append(bad, fmt.Sprintf("%s=false reason:%s message:%s", c.Type, c.Reason, c.Message))
			}
		}
		if len(bad) > 0 {
			problem = fmt.Errorf("container runtime not ready: %s", strings.Join(bad, "; "))
		}
	}
	h.mu.Lock()
	h.lastErr, h.checked = problem, true
	if err == nil {
		h.handlers, h.handlersSet = resp.GetRuntimeHandlers(), true
	}
	h.mu.Unlock()
}

// runtimeHandlers are the handlers (and their features) the runtime reported
// last; false before any Status answered.
func (h *runtimeHealth) runtimeHandlers() ([]*runtimeapi.RuntimeHandler, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handlers, h.handlersSet
}

func (h *runtimeHealth) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.checked {
		return fmt.Errorf("container runtime status check may not have completed yet")
	}
	return h.lastErr
}

// healthChecker is anything that can say it is unhealthy.
type healthChecker interface{ Healthy() error }

// healthzServer serves /healthz on healthzBindAddress:healthzPort (127.0.0.1:10248).
type healthzServer struct {
	addr   string
	checks map[string]healthChecker
	// details are informational lines (e.g. whether logind allows the shutdown
	// grace); they never fail the check.
	details func() []string
}

func newHealthzServer(kc *kubeletconfigv1beta1.KubeletConfiguration, pleg, loop healthChecker, rt *runtimeHealth) *healthzServer {
	if kc.HealthzPort == nil || *kc.HealthzPort == 0 {
		return nil
	}
	return &healthzServer{
		addr:   net.JoinHostPort(kc.HealthzBindAddress, strconv.Itoa(int(*kc.HealthzPort))),
		checks: map[string]healthChecker{"pleg": pleg, "syncloop": loop},
	}
}

func (s *healthzServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var failed []string
	for name, c := range s.checks {
		if err := c.Healthy(); err != nil {
			failed = append(failed, fmt.Sprintf("[-]%s failed: %v", name, err))
		}
	}
	var details []string
	if s.details != nil {
		details = s.details()
	}
	if len(failed) > 0 {
		http.Error(w, strings.Join(append(failed, details...), "\n")+"\nhealthz check failed", http.StatusInternalServerError)
		return
	}
	if r.URL.Query().Has("verbose") && len(details) > 0 {
		_, _ = w.Write([]byte(strings.Join(details, "\n") + "\n"))
	}
	_, _ = w.Write([]byte("ok"))
}

// serve serves /healthz until ctx ends. Its port in use is logged, not fatal, as
// upstream.
func (s *healthzServer) serve(ctx context.Context) {
	mux := http.NewServeMux()
	mux.Handle("/healthz", s)
	srv := &http.Server{Addr: s.addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		klog.FromContext(ctx).Error(err, "Serving healthz", "address", s.addr)
	}
	<-closed
}
