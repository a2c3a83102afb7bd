package agent

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/nodelet/nodelet/internal/leakcheck"
)

// TestServicesInformerJoined: the services informer runs in envSources.Run, which
// returns only once the informer stopped watching and its goroutines returned. Before,
// the informer was started at build and never joined.
func TestServicesInformerJoined(t *testing.T) {
	defer leakcheck.Check(t)()
	client := fake.NewClientset(&v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}})
	watching := make(chan *watch.FakeWatcher, 1)
	client.PrependWatchReactor("services", func(clienttesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake()
		watching <- w
		return true, w, nil
	})
	env := newEnvSources(client)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); env.Run(ctx) }()

	svcs, err := env.Services(ctx, "ns")
	if err != nil || len(svcs) != 1 {
		t.Fatalf("Services = %v, %v; want the one service", svcs, err)
	}
	w := <-watching
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !w.IsStopped() {
		t.Error("the services watch is still open after Run returned")
	}
}
