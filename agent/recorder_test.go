package agent

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

// The event correlator's caches are bounded by eventCorrelatorCacheSize: an event repeated
// at once is counted on its first (a PATCH), one repeated after more distinct events than
// the cache holds is created anew, so the events of pods long gone are not kept.
func TestRecorderCorrelatorCacheIsBounded(t *testing.T) {
	client := fake.NewClientset()
	rec, stop := newRecorder(client, "node-1")
	defer stop()
	verbs := func() (creates, patches int) {
		for _, a := range client.Actions() {
			if a.GetResource().Resource != "events" {
				continue
			}
			switch a.GetVerb() {
			case "create":
				creates++
			case "patch":
				patches++
			}
		}
		return creates, patches
	}
	pod := func(i int) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
	}
	first := pod(0)
	rec.Eventf(first, v1.EventTypeNormal, "Started", "Started container main")
	rec.Eventf(first, v1.EventTypeNormal, "Started", "Started container main")
	eventually.True(t, "one create and one patch", func() bool { c, p := verbs(); return c == 1 && p == 1 })

	// In steps: the broadcaster drops events beyond its queue of 1000.
	for i := 1; i <= eventCorrelatorCacheSize; i++ {
		rec.Eventf(pod(i), v1.EventTypeNormal, "Started", "Started container main")
		if i%100 == 0 || i == eventCorrelatorCacheSize {
			eventually.True(t, "an event created per other pod", func() bool { c, _ := verbs(); return c == 1+i })
		}
	}
	rec.Eventf(first, v1.EventTypeNormal, "Started", "Started container main")
	eventually.True(t, "the first pod's event created anew", func() bool { c, _ := verbs(); return c == 2+eventCorrelatorCacheSize })
	time.Sleep(100 * time.Millisecond)
	if _, p := verbs(); p != 1 {
		t.Errorf("%d patches, want only the first repeat's", p)
	}
}
