//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// urlPods serves static pods to nodelet's staticPodURL: a Pod or a PodList, only to
// requests carrying the configured Authorization header.
type urlPods struct {
	mu       sync.Mutex
	body     []byte
	gets     int
	unauthed int
}

const urlPodsToken = "Bearer e2e-static-pod-url"

func (u *urlPods) set(t *testing.T, obj any) {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.body = data
}

func (u *urlPods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r.Header.Get("Authorization") != urlPodsToken {
		u.unauthed++
		http.Error(w, "no token", http.StatusUnauthorized)
		return
	}
	u.gets++
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(u.body)
}

func (u *urlPods) counts() (gets, unauthed int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.gets, u.unauthed
}

// TestStaticPodURL: pods served at staticPodURL (with staticPodURLHeader) run with
// mirror pods, as a single Pod and as a PodList, and a change of the served body is
// picked up at the next httpCheckFrequency.
func TestStaticPodURL(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	const checkEvery = 5 * time.Second

	pod := func(name string, labels map[string]string) v1.Pod {
		return v1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
			Spec: v1.PodSpec{
				HostNetwork:                   true,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []v1.Container{{
					Name: "main", Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
					Command: []string{"sh", "-c", "exec sleep 3600"},
				}},
			},
		}
	}
	src := &urlPods{}
	first := pod("url-web", map[string]string{"version": "1"})
	src.set(t, first)
	srv := httptest.NewServer(src)
	defer srv.Close()

	startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.StaticPodURL = srv.URL + "/pods"
		c.StaticPodURLHeader = map[string][]string{"Authorization": {urlPodsToken}}
		c.HTTPCheckFrequency = metav1.Duration{Duration: checkEvery}
	}})
	webName := "url-web-" + f.Env.NodeName
	mirror := f.WaitForPod(ctx, "default", webName, 2*time.Minute, "a Running mirror pod of the URL's pod", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && framework.IsPodReady(p)
	})
	if mirror.Annotations[podutil.AnnotationConfigMirror] == "" || mirror.Annotations[podutil.AnnotationConfigSource] != podutil.SourceHTTP {
		t.Errorf("mirror pod annotations = %v, want config.mirror set and config.source http", mirror.Annotations)
	}
	if gets, unauthed := src.counts(); gets == 0 || unauthed != 0 {
		t.Errorf("%d GETs with the header, %d without; want every GET to carry staticPodURLHeader", gets, unauthed)
	}

	// A PodList: the first pod edited, a second one added. Both show up after the
	// next check (the edited pod is a new pod, so its mirror pod is replaced).
	list := v1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"},
		Items: []v1.Pod{pod("url-web", map[string]string{"version": "2"}), pod("url-two", nil)}}
	changed := time.Now()
	src.set(t, list)
	// One period for the source, then the mirror pods are written right away; the rest
	// is the API server and the pod start.
	f.WaitForPod(ctx, "default", webName, checkEvery+time.Minute, "the mirror pod of the edited pod", func(p *v1.Pod) bool {
		return p.Labels["version"] == "2"
	})
	t.Logf("the edit reached the API server %.1fs after the body changed (httpCheckFrequency %s)", time.Since(changed).Seconds(), checkEvery)
	f.WaitForPod(ctx, "default", "url-two-"+f.Env.NodeName, checkEvery+time.Minute, "a Running mirror pod of the added pod", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning
	})

	// An empty list: both pods stop and their mirror pods go.
	src.set(t, v1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, Items: []v1.Pod{}})
	f.WaitForPodGone(ctx, "default", webName, checkEvery+time.Minute)
	f.WaitForPodGone(ctx, "default", "url-two-"+f.Env.NodeName, checkEvery+time.Minute)
}
