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
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
	"github.com/nodelet/nodelet/podobjects"
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
	env := newEnvSources(client, nil)
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

// env reads configMaps and secrets through the object source.
func TestEnvSourcesReadObjects(t *testing.T) {
	client := fake.NewClientset(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}, Data: map[string]string{"k": "v"}})
	objs, err := podobjects.New(kubeletconfigv1beta1.GetChangeDetectionStrategy, client, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	env := newEnvSources(client, objs)
	if cm, err := env.ConfigMap(context.Background(), "ns", "c"); err != nil || cm.Data["k"] != "v" {
		t.Fatalf("ConfigMap = %v, %v", cm, err)
	}
	if _, err := env.Secret(context.Background(), "ns", "s"); err == nil || err.Error() != `secret "s" not found` {
		t.Fatalf("Secret of a missing one = %v; want the object source's NotFound", err)
	}
	if _, err := newEnvSources(nil, nil).Secret(context.Background(), "ns", "s"); err == nil {
		t.Fatal("standalone env read a secret")
	}
}

func TestNodeObjectTTL(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *v1.Node
		want time.Duration
		ok   bool
	}{
		{"no node", nil, 0, false},
		{"no annotation", &v1.Node{}, 0, false},
		{"zero", &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1.ObjectTTLAnnotationKey: "0"}}}, 0, true},
		{"15s", &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1.ObjectTTLAnnotationKey: "15"}}}, 15 * time.Second, true},
		{"garbage", &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1.ObjectTTLAnnotationKey: "soon"}}}, 0, false},
		{"negative", &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1.ObjectTTLAnnotationKey: "-1"}}}, 0, false},
	} {
		got, ok := nodeObjectTTL(tc.node)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: nodeObjectTTL = %s, %v; want %s, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
