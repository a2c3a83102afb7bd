package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

// The RuntimeClass informer resolves names to handlers, waits for its first
// list, and answers a missing class with the lister's NotFound words, which
// the FailedCreatePodSandBox event carries as upstream's does.
func TestRuntimeClassesLookup(t *testing.T) {
	client := fake.NewSimpleClientset(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "test"}, Handler: "runc-test"})
	rc := newRuntimeClasses(client)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rc.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for _, name := range []*string{nil, ptr.To("")} {
		if h, err := rc.LookupRuntimeHandler(ctx, name); h != "" || err != nil {
			t.Errorf("no class: %q, %v; want the default handler", h, err)
		}
	}
	lookCtx, lookCancel := context.WithTimeout(ctx, 30*time.Second)
	defer lookCancel()
	if h, err := rc.LookupRuntimeHandler(lookCtx, ptr.To("test")); h != "runc-test" || err != nil {
		t.Fatalf("class test: %q, %v; want runc-test", h, err)
	}
	_, err := rc.LookupRuntimeHandler(lookCtx, ptr.To("gone"))
	if err == nil || err.Error() != `runtimeclass.node.k8s.io "gone" not found` {
		t.Errorf("missing class: %v", err)
	}
	// A class created later is seen through the watch.
	if _, err := client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gone"}, Handler: "runc"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the new RuntimeClass to resolve", func() bool {
		h, err := rc.LookupRuntimeHandler(lookCtx, ptr.To("gone"))
		return err == nil && h == "runc"
	})
}

// Runtime health keeps the handlers of the last Status that answered, for the
// user namespace check; a failed Status keeps the earlier ones.
func TestRuntimeHealthKeepsRuntimeHandlers(t *testing.T) {
	st := &scriptedStatus{resp: &runtimeapi.StatusResponse{
		Status:          &runtimeapi.RuntimeStatus{},
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}},
	}}
	h := newRuntimeHealth(st, testingclock.NewFakeClock(time.Now()))
	if _, set := h.runtimeHandlers(); set {
		t.Fatal("handlers set before any Status")
	}
	h.check(context.Background())
	hs, set := h.runtimeHandlers()
	if !set || len(hs) != 1 || !hs[0].GetFeatures().GetUserNamespaces() {
		t.Fatalf("handlers %v, %v", hs, set)
	}
	st.err = context.DeadlineExceeded
	h.check(context.Background())
	if hs, set := h.runtimeHandlers(); !set || len(hs) != 1 {
		t.Errorf("a failed Status dropped the handlers: %v, %v", hs, set)
	}
	if base, _ := h.reasons(); !slices.Equal(base, []string{"container runtime is down"}) {
		t.Errorf("health reasons = %q", base)
	}
}

type scriptedStatus struct {
	resp *runtimeapi.StatusResponse
	err  error
}

func (s *scriptedStatus) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	if s.err != nil {
		return nil, s.err
	}
	return s.resp, nil
}
