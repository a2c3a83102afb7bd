package prober

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

func TestRunHook(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	ip, port := hostPort(t, srv.URL)
	exec := &fakeExec{fail: map[string]bool{"bad": true}, calls: map[string]int{}}
	h := NewHandler(exec)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"}}
	target := Target{PodIP: ip, Container: &v1.Container{Name: "app"}, ContainerID: "c1"}
	tests := []struct {
		name    string
		hook    v1.LifecycleHandler
		wantErr bool
		wantMsg string
	}{
		{name: "exec ok", hook: v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"good"}}}},
		{name: "exec failing", hook: v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"bad"}}}, wantErr: true,
			wantMsg: `Exec lifecycle hook ([bad]) for Container "app" in Pod "web_default(uid-1)" failed - error:`},
		{name: "httpGet ok on the pod IP", hook: v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}}},
		// As upstream: only a request that fails is a failed hook, whatever the status.
		{name: "httpGet answered 500 is no failure", hook: v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/fail", Port: intstr.FromInt32(int32(port))}}},
		{name: "httpGet to a closed port", hook: v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/x", Port: intstr.FromInt32(int32(closedPort(t)))}}, wantErr: true,
			wantMsg: "HTTP lifecycle hook (/x)"},
		{name: "httpGet https to a plain server falls back to http", hook: v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port)), Scheme: v1.URISchemeHTTPS}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := h.RunHook(context.Background(), testingclock.NewFakeClock(time.Now()), pod, target, &tt.hook)
			if (err != nil) != tt.wantErr || !strings.HasPrefix(msg, tt.wantMsg) {
				t.Errorf("RunHook = %q, %v; want error %v and message %q", msg, err, tt.wantErr, tt.wantMsg)
			}
		})
	}
	if hits != 3 {
		t.Errorf("server saw %d requests, want 3", hits)
	}

	t.Run("sleep waits on the clock and ends early with ctx", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Now())
		done := make(chan error, 1)
		go func() {
			_, err := h.RunHook(context.Background(), clk, pod, target, &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}})
			done <- err
		}()
		eventually.True(t, "the sleep waiting", clk.HasWaiters)
		select {
		case <-done:
			t.Fatal("sleep hook returned before its time")
		case <-time.After(20 * time.Millisecond):
		}
		clk.Step(5 * time.Second)
		if err := <-done; err != nil {
			t.Errorf("sleep hook: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := h.RunHook(ctx, clk, pod, target, &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 60}}); err != nil {
			t.Errorf("a sleep cut short by the grace period is an error: %v", err)
		}
	})
}

// timeoutExec is a runtime whose exec never ends by itself; it records the
// timeout it was given.
type timeoutExec struct{ timeout chan time.Duration }

func (h timeoutExec) ExecSync(ctx context.Context, _ string, _ []string, timeout time.Duration) ([]byte, []byte, error) {
	h.timeout <- timeout
	<-ctx.Done()
	return nil, nil, ctx.Err()
}

// TestExecHookEndsWithItsContext: an exec hook has no timeout of its own (as
// upstream's, which runs it with timeout 0); the caller's context ends it
// (postStart: the sync's cancellation; preStop: the grace period).
func TestExecHookEndsWithItsContext(t *testing.T) {
	exec := timeoutExec{timeout: make(chan time.Duration, 1)}
	h := NewHandler(exec)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"}}
	target := Target{Container: &v1.Container{Name: "app"}, ContainerID: "c1"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.RunHook(ctx, testingclock.NewFakeClock(time.Now()), pod, target, &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sleep", "3600"}}})
		done <- err
	}()
	if got := <-exec.timeout; got != 0 {
		t.Errorf("exec hook ran with timeout %v, want none", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("RunHook after cancel = %v, want context.Canceled", err)
	}
}

// closedPort is a local TCP port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}
