//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestImagePullFromRegistry pulls from the rig's local registry (htpasswd auth, plain
// HTTP): with an imagePullSecret the pull succeeds; without it, and for a missing tag,
// the container waits in ErrImagePull then ImagePullBackOff; IfNotPresent with the image
// present and the secret that pulled it does not pull at all; without the secret the present
// private image is not lent to the pod (IfNotPresent re-pulls and is refused, Never says
// the image is not present).
func TestImagePullFromRegistry(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	r := privateRegistry(t, f)
	reg, image := r.host, r.image
	ns := f.NewNamespace()
	r.createSecret(ctx, t, f, ns, "regcred")
	startNode(t, f, framework.NodeletOptions{})

	pod := func(name, img string, policy v1.PullPolicy, secret bool) *v1.Pod {
		p := f.BusyboxPod(ns, name, "sh", "-c", "sleep 3600")
		p.Spec.Containers[0].Image = img
		p.Spec.Containers[0].ImagePullPolicy = policy
		if secret {
			p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		}
		return p
	}

	// (a) Always + secret: pulled and running.
	f.CreatePod(ctx, pod("with-secret", image, v1.PullAlways, true))
	f.WaitForPodReady(ctx, ns, "with-secret", 2*time.Minute)
	pulling := waitForEvent(ctx, t, f, ns, "with-secret", "Pulling", 30*time.Second)
	if want := fmt.Sprintf("Pulling image %q", image); pulling.Message != want {
		t.Errorf("Pulling event %q, want %q", pulling.Message, want)
	}
	pulled := waitForEvent(ctx, t, f, ns, "with-secret", "Pulled", 30*time.Second)
	if !strings.HasPrefix(pulled.Message, fmt.Sprintf("Successfully pulled image %q in ", image)) || !strings.Contains(pulled.Message, "including waiting") {
		t.Errorf("Pulled event %q", pulled.Message)
	}
	t.Logf("with the pull secret: %s", pulled.Message)
	if tags, _ := f.CRI.ImageTags(ctx); !slices.Contains(tags, image) {
		t.Errorf("after the pull the runtime lists %v, not %s", tags, image)
	}

	// (b) Always without the secret: the registry refuses, ErrImagePull then ImagePullBackOff.
	// ErrImagePull lasts only until the next sync, so the API's updates are watched, not polled.
	seen := watchWaiting(ctx, t, f, ns, "no-secret", time.Minute, "ErrImagePull", "ImagePullBackOff")
	f.CreatePod(ctx, pod("no-secret", image, v1.PullAlways, false))
	reasons := <-seen
	errPull, backoff := reasons["ErrImagePull"], reasons["ImagePullBackOff"]
	if !registryRefused(errPull.Message) {
		t.Errorf("ErrImagePull message does not say the registry refused: %q", errPull.Message)
	}
	t.Logf("without the secret: ErrImagePull: %s", errPull.Message)
	if want := fmt.Sprintf("Back-off pulling image %q", image); backoff.Message != want {
		t.Errorf("ImagePullBackOff message %q, want %q", backoff.Message, want)
	}
	failed := waitForEvent(ctx, t, f, ns, "no-secret", "Failed", 30*time.Second)
	if !strings.HasPrefix(failed.Message, fmt.Sprintf("Failed to pull image %q: ", image)) {
		t.Errorf("Failed event %q", failed.Message)
	}
	if ev := waitForEvent(ctx, t, f, ns, "no-secret", "BackOff", 30*time.Second); ev.Message != backoff.Message {
		t.Errorf("BackOff event %q, want %q", ev.Message, backoff.Message)
	}

	// (c) a tag the registry does not have: ErrImagePull with the registry's not-found.
	missing := reg + "/busybox:does-not-exist"
	seen = watchWaiting(ctx, t, f, ns, "missing-tag", time.Minute, "ErrImagePull")
	f.CreatePod(ctx, pod("missing-tag", missing, v1.PullIfNotPresent, true))
	notFound := (<-seen)["ErrImagePull"]
	if !strings.Contains(strings.ToLower(notFound.Message), "not found") {
		t.Errorf("ErrImagePull for a missing tag: %q, want the registry's not found", notFound.Message)
	}
	t.Logf("missing tag: ErrImagePull: %s", notFound.Message)

	// (d) IfNotPresent with the image present (pulled by (a)) and the same secret: no pull.
	// Without the secret the pod would have to pull (imagePullCredentialsVerificationPolicy).
	f.CreatePod(ctx, pod("present", image, v1.PullIfNotPresent, true))
	f.WaitForPodReady(ctx, ns, "present", time.Minute)
	ev := waitForEvent(ctx, t, f, ns, "present", "Pulled", 30*time.Second)
	if want := fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", image); ev.Message != want {
		t.Errorf("Pulled event %q, want %q", ev.Message, want)
	}
	if reasons := eventReasons(ctx, t, f, ns, "present"); slices.Contains(reasons, "Pulling") {
		t.Errorf("IfNotPresent with the image present pulled anyway: events %v", reasons)
	}

	// (e) the image is present (pulled by (a) with the secret), IfNotPresent, no secret: the
	// pod may not borrow (a)'s credentials (imagePullCredentialsVerificationPolicy, default
	// NeverVerifyPreloadedImages): it re-pulls with its own (none) and the registry refuses.
	seen = watchWaiting(ctx, t, f, ns, "borrow", time.Minute, "ErrImagePull")
	f.CreatePod(ctx, pod("borrow", image, v1.PullIfNotPresent, false))
	borrow := (<-seen)["ErrImagePull"]
	if !registryRefused(borrow.Message) {
		t.Errorf("IfNotPresent without the secret: ErrImagePull %q, want the registry's refusal", borrow.Message)
	}
	t.Logf("present private image, no secret, IfNotPresent: ErrImagePull: %s", borrow.Message)

	// (f) the same with Never: refused with upstream's not-present wording (the pod must not
	// learn that the image is on the node).
	seen = watchWaiting(ctx, t, f, ns, "borrow-never", time.Minute, "ErrImageNeverPull")
	f.CreatePod(ctx, pod("borrow-never", image, v1.PullNever, false))
	never := (<-seen)["ErrImageNeverPull"]
	if want := fmt.Sprintf("Container image %q is not present with pull policy of Never", image); never.Message != want {
		t.Errorf("Never without the secret: ErrImageNeverPull %q, want %q", never.Message, want)
	}
	for _, name := range []string{"borrow", "borrow-never"} {
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting pod %s: %v", name, err)
		}
		if p.Status.Phase == v1.PodRunning {
			t.Errorf("pod %s without the secret runs the private image", name)
		}
	}

	for _, name := range []string{"with-secret", "no-secret", "missing-tag", "present", "borrow", "borrow-never"} {
		if err := f.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Errorf("deleting %s: %v", name, err)
		}
	}
	for _, name := range []string{"with-secret", "no-secret", "missing-tag", "present", "borrow", "borrow-never"} {
		f.WaitForPodGone(ctx, ns, name, time.Minute)
	}
}

// rigRegistry is the rig's local registry (htpasswd auth, plain HTTP) and its private image.
type rigRegistry struct{ host, user, password, image string }

// privateRegistry returns the rig's registry, with its private image removed from the runtime
// (so the test's first pull really goes to the registry) until the test ends (none is left
// behind; the rig's own nodelet.local images are never touched).
func privateRegistry(t *testing.T, f *framework.Framework) rigRegistry {
	t.Helper()
	r := rigRegistry{f.Env.All["REGISTRY"], f.Env.All["REGISTRY_USER"], f.Env.All["REGISTRY_PASSWORD"], f.Env.All["REGISTRY_IMAGE"]}
	if r.host == "" || r.image == "" {
		t.Fatal("rig.env has no REGISTRY: the rig predates its registry, rerun test/rig/up.sh")
	}
	rmImage := func() { _ = exec.Command(f.Env.Ctr, "images", "rm", r.image).Run() }
	rmImage()
	t.Cleanup(rmImage)
	if tags, _ := f.CRI.ImageTags(context.Background()); slices.Contains(tags, r.image) {
		t.Fatalf("could not remove %s before the test", r.image)
	}
	return r
}

// createSecret creates a kubernetes.io/dockerconfigjson pull secret for the registry in ns.
func (r rigRegistry) createSecret(ctx context.Context, t *testing.T, f *framework.Framework, ns, name string) {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{r.host: map[string]string{
		"username": r.user, "password": r.password, "auth": base64.StdEncoding.EncodeToString([]byte(r.user + ":" + r.password)),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Type:       v1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{v1.DockerConfigJsonKey: cfg},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// watchWaiting watches the pod (from before it exists) and delivers, once every reason
// has been seen or the timeout passed, the first waiting state of its first container with
// each of reasons. It fails the test on timeout.
func watchWaiting(ctx context.Context, t *testing.T, f *framework.Framework, ns, name string, timeout time.Duration, reasons ...string) <-chan map[string]*v1.ContainerStateWaiting {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	w, err := f.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		cancel()
		t.Fatalf("watching pod %s: %v", name, err)
	}
	out := make(chan map[string]*v1.ContainerStateWaiting, 1)
	go func() {
		defer cancel()
		defer w.Stop()
		got := map[string]*v1.ContainerStateWaiting{}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok || len(p.Status.ContainerStatuses) == 0 {
				continue
			}
			if wt := p.Status.ContainerStatuses[0].State.Waiting; wt != nil && slices.Contains(reasons, wt.Reason) && got[wt.Reason] == nil {
				got[wt.Reason] = wt
			}
			if len(got) == len(reasons) {
				break
			}
		}
		out <- got
	}()
	res := make(chan map[string]*v1.ContainerStateWaiting, 1)
	go func() {
		got := <-out
		for _, r := range reasons {
			if got[r] == nil {
				t.Errorf("pod %s: container never waited with %s within %v (saw %v)", name, r, timeout, got)
				got[r] = &v1.ContainerStateWaiting{}
			}
		}
		res <- got
	}()
	return res
}

// waitForEvent waits for an event of the pod with reason and returns it.
func waitForEvent(ctx context.Context, t *testing.T, f *framework.Framework, ns, pod, reason string, timeout time.Duration) *v1.Event {
	t.Helper()
	var found *v1.Event
	err := framework.WaitFor(ctx, timeout, "event "+reason+" of "+pod, func(ctx context.Context) (bool, error) {
		evs, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
		if err != nil || len(evs.Items) == 0 {
			return false, err
		}
		found = &evs.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v; events: %v", err, eventReasons(ctx, t, f, ns, pod))
	}
	return found
}

// registryRefused reports whether a pull error (the runtime's message, passed through) says the
// registry refused the credentials: containerd 1.6 quotes the registry's "401 Unauthorized";
// containerd 2.x says "pull access denied, ... authorization failed: no basic auth credentials".
func registryRefused(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"401", "unauthorized", "authorization failed"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
