package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/periodic"
	"github.com/nodelet/nodelet/node"
	"github.com/nodelet/nodelet/pleg"
)

// runtimeStatuser is the CRI call runtime health needs.
type runtimeStatuser interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// runtimeHealthPeriod is how often the runtime's Status is asked (upstream's
// updateRuntimeUp period).
const runtimeHealthPeriod = 5 * time.Second

// runtimeSyncThreshold is how long a runtime that answers but is not RuntimeReady
// may go before it is also called down (upstream's maxWaitForContainerRuntime).
const runtimeSyncThreshold = 30 * time.Second

// runtimeHealth polls the runtime's Status every runtimeHealthPeriod, as upstream's
// updateRuntimeUp, and keeps why it is not ready (the node's Ready condition). When
// those reasons change it calls onChange at once, so the node's status says so
// without waiting for nodeStatusUpdateFrequency.
type runtimeHealth struct {
	rt    runtimeStatuser
	clock clock.WithTicker
	// onChange is called (outside the lock) after a check changed the reasons;
	// set before run.
	onChange func()

	mu    sync.Mutex
	state runtimeState
	// reported are the reasons after the last check, to tell a change.
	reported []string
	// handlers are the runtime handlers of the last Status that answered
	// (upstream's runtimeState.runtimeHandlers); handlersSet once one did.
	handlers    []*runtimeapi.RuntimeHandler
	handlersSet bool
}

func newRuntimeHealth(rt runtimeStatuser, clk clock.WithTicker) *runtimeHealth {
	return &runtimeHealth{rt: rt, clock: clk}
}

func (h *runtimeHealth) run(ctx context.Context) {
	periodic.NowAndEvery(ctx, h.clock, runtimeHealthPeriod, h.check)
}

func (h *runtimeHealth) check(ctx context.Context) {
	resp, err := h.rt.Status(ctx, false)
	now := h.clock.Now()
	h.mu.Lock()
	h.state = nextRuntimeState(h.state, resp, err, now)
	if err == nil {
		h.handlers, h.handlersSet = resp.GetRuntimeHandlers(), true
	}
	base, conds := runtimeReasons(h.state, now)
	reasons := append(base, conds...)
	changed := !slices.Equal(reasons, h.reported)
	h.reported = reasons
	onChange := h.onChange
	h.mu.Unlock()
	if !changed {
		return
	}
	if len(reasons) == 0 {
		klog.FromContext(ctx).Info("Container runtime is ready")
	} else {
		klog.FromContext(ctx).Error(err, "Container runtime is not ready", "reasons", reasons)
	}
	if onChange != nil {
		onChange()
	}
}

// runtimeState is what the runtime's Status answers said, as upstream's
// runtimeState keeps it.
type runtimeState struct {
	// lastSync is when Status last answered RuntimeReady (upstream's
	// lastBaseRuntimeSync); zero before that.
	lastSync time.Time
	// unreachable: the last Status call failed.
	unreachable bool
	// runtimeErr and networkErr are upstream's runtimeError and networkError from
	// the last answer ("" when ready); a failed call keeps them, as upstream.
	runtimeErr, networkErr string
}

// nextRuntimeState folds one Status outcome into s, as upstream's updateRuntimeUp.
func nextRuntimeState(s runtimeState, resp *runtimeapi.StatusResponse, err error, now time.Time) runtimeState {
	if err != nil || resp.GetStatus() == nil {
		s.unreachable = true
		return s
	}
	s.unreachable = false
	s.networkErr = ""
	if c := runtimeCondition(resp, runtimeapi.NetworkReady); c == nil || !c.Status {
		s.networkErr = "container runtime network not ready: " + formatRuntimeCondition(c)
	}
	s.runtimeErr = ""
	if c := runtimeCondition(resp, runtimeapi.RuntimeReady); c == nil || !c.Status {
		s.runtimeErr = "container runtime not ready: " + formatRuntimeCondition(c)
		return s
	}
	s.lastSync = now
	return s
}

// runtimeReasons are s's reasons for the node not to be Ready at now, in upstream's
// words and order: base (whether the runtime answers) goes before the health checks
// (PLEG), conds (its RuntimeReady, then NetworkReady, condition) after them.
// Unlike upstream, which says "container runtime is down" only 30s after the last
// good answer, a failed Status says it at once: the node's status should tell a
// dead runtime within the health period.
func runtimeReasons(s runtimeState, now time.Time) (base, conds []string) {
	switch {
	case s.unreachable:
		base = []string{"container runtime is down"}
	case s.lastSync.IsZero():
		base = []string{"container runtime status check may not have completed yet"}
	case !now.Before(s.lastSync.Add(runtimeSyncThreshold)):
		base = []string{"container runtime is down"}
	}
	for _, e := range []string{s.runtimeErr, s.networkErr} {
		if e != "" {
			conds = append(conds, e)
		}
	}
	return base, conds
}

// runtimeCondition is the first condition of type t, nil when there is none.
func runtimeCondition(resp *runtimeapi.StatusResponse, t string) *runtimeapi.RuntimeCondition {
	for _, c := range resp.GetStatus().GetConditions() {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}

// formatRuntimeCondition prints c as upstream's RuntimeCondition.String does.
func formatRuntimeCondition(c *runtimeapi.RuntimeCondition) string {
	if c == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s=%t reason:%s message:%s", c.Type, c.Status, c.Reason, c.Message)
}

// runtimeHandlers are the handlers (and their features) the runtime reported
// last; false before any Status answered.
func (h *runtimeHealth) runtimeHandlers() ([]*runtimeapi.RuntimeHandler, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handlers, h.handlersSet
}

// networkError is why the runtime's network is not ready, "" when it is (upstream's
// runtimeState.networkErrors).
func (h *runtimeHealth) networkError() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state.networkErr
}

// reasons are the runtime's reasons for the node not to be Ready now (see
// runtimeReasons).
func (h *runtimeHealth) reasons() (base, conds []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return runtimeReasons(h.state, h.clock.Now())
}

// healthChecker is anything that can say it is unhealthy.
type healthChecker interface{ Healthy() error }

// namedCheck is a health check the node's Ready condition reports by name, as
// upstream's runtimeState health checks ("PLEG is not healthy: ...").
type namedCheck struct {
	name  string
	check healthChecker
}

// plegChecks are the PLEGs' health checks; epleg is nil without EventedPLEG.
func plegChecks(gpleg healthChecker, epleg *pleg.Evented) []namedCheck {
	checks := []namedCheck{{"PLEG", gpleg}}
	if epleg != nil {
		checks = append(checks, namedCheck{"EventedPLEG", epleg})
	}
	return checks
}

// nodeReadiness gives the node's reasons not to be Ready in upstream's order
// (ReadyCondition: runtimeErrors — the runtime's sync, the health checks, its
// RuntimeReady — then networkErrors, then the shutdown manager's).
func nodeReadiness(health *runtimeHealth, checks []namedCheck, shutdown func() []string) node.ReadinessFunc {
	return func() []string {
		base, conds := health.reasons()
		reasons := base
		for _, c := range checks {
			if err := c.check.Healthy(); err != nil {
				reasons = append(reasons, c.name+" is not healthy: "+err.Error())
			}
		}
		reasons = append(reasons, conds...)
		return append(reasons, shutdown()...)
	}
}

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
