package framework

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// Framework is one test's handle on the rig. Its helpers fail the test (t.Fatalf) on error,
// so scenarios read as a list of steps.
type Framework struct {
	T          testing.TB
	Env        *RigEnv
	Client     kubernetes.Interface // admin (system:masters)
	RestConfig *rest.Config
	CRI        *CRIClient

	mu       sync.Mutex
	nodelets []*Nodelet
	// lastStart is when a nodelet of this test last started: a Ready condition
	// heartbeated before it is a previous test's (or process's), not this one's.
	lastStart time.Time
}

// checkNodelets is a *StopError when a nodelet this test started has exited without being
// asked to (Stop, Kill, WaitExit): the Wait helpers then fail at once instead of timing out.
func (f *Framework) checkNodelets() error {
	f.mu.Lock()
	ns := append([]*Nodelet(nil), f.nodelets...)
	f.mu.Unlock()
	for _, n := range ns {
		if err := n.unexpectedExit(); err != nil {
			return &StopError{Err: err}
		}
	}
	return nil
}

// waitFor is WaitFor that also stops when a nodelet of this test died.
func (f *Framework) waitFor(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	return WaitFor(ctx, timeout, what, func(ctx context.Context) (bool, error) {
		if err := f.checkNodelets(); err != nil {
			return false, err
		}
		return cond(ctx)
	})
}

// New loads rig.env, builds the admin client and the CRI client, and fails the test when the
// rig is not there.
func New(t testing.TB) *Framework {
	t.Helper()
	env, err := LoadRigEnv()
	if err != nil {
		t.Fatalf("loading the rig env: %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatalf("loading admin kubeconfig %s: %v", env.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("building admin client: %v", err)
	}
	c, err := DialCRI(env.ContainerRuntimeEndpoint, WithCtr(env.Ctr))
	if err != nil {
		t.Fatalf("connecting to CRI: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	keepRigImages(t, env, c)
	return &Framework{T: t, Env: env, Client: cs, RestConfig: cfg, CRI: c}
}

// NodeClient is a client with the node's credential (system:node:<NODE_NAME>), to check what
// the Node authorizer and NodeRestriction allow.
func (f *Framework) NodeClient() kubernetes.Interface {
	f.T.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", f.Env.NodeKubeconfig)
	if err != nil {
		f.T.Fatalf("loading node kubeconfig %s: %v", f.Env.NodeKubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		f.T.Fatalf("building node client: %v", err)
	}
	return cs
}

// Poll is how often the Wait helpers look.
const Poll = 200 * time.Millisecond

// StopError, returned by a WaitFor condition, ends the wait at once with Err (other errors
// are taken as transient and polled through).
type StopError struct{ Err error }

func (e *StopError) Error() string { return e.Err.Error() }
func (e *StopError) Unwrap() error { return e.Err }

// WaitFor polls cond until it returns true or a *StopError, or timeout passes; other
// condition errors are retried. The error names what was waited for and the last condition
// error, if any.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, Poll, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		var stop *StopError
		switch {
		case errors.As(err, &stop):
			return false, stop
		case err != nil && ctx.Err() == nil:
			// Keep polling through transient errors; report the last one on timeout. (An
			// error caused by the deadline itself would only hide the interesting one.)
			last = err
		}
		return ok, nil
	})
	if err != nil {
		if last != nil {
			return fmt.Errorf("waiting %v for %s: %w (last error: %v)", timeout, what, err, last)
		}
		return fmt.Errorf("waiting %v for %s: %w", timeout, what, err)
	}
	return nil
}

// WaitForPod polls the pod until cond holds and returns it. A pod that does not exist yet is
// polled for, like any other unmet condition.
func (f *Framework) WaitForPod(ctx context.Context, ns, name string, timeout time.Duration, what string, cond func(*v1.Pod) bool) *v1.Pod {
	f.T.Helper()
	var pod *v1.Pod
	err := f.waitFor(ctx, timeout, fmt.Sprintf("pod %s/%s %s", ns, name, what), func(ctx context.Context) (bool, error) {
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return cond(p), nil
	})
	if err != nil {
		f.T.Fatalf("%v\nlast seen: %s", err, DescribePod(pod))
	}
	return pod
}

// WaitForPodPhase waits until the pod reaches phase.
func (f *Framework) WaitForPodPhase(ctx context.Context, ns, name string, phase v1.PodPhase, timeout time.Duration) *v1.Pod {
	f.T.Helper()
	return f.WaitForPod(ctx, ns, name, timeout, "to be "+string(phase), func(p *v1.Pod) bool { return p.Status.Phase == phase })
}

// WaitForPodReady waits until the pod has condition Ready=True.
func (f *Framework) WaitForPodReady(ctx context.Context, ns, name string, timeout time.Duration) *v1.Pod {
	f.T.Helper()
	return f.WaitForPod(ctx, ns, name, timeout, "to be Ready", IsPodReady)
}

// WaitForPodGone waits until the pod no longer exists in the API.
func (f *Framework) WaitForPodGone(ctx context.Context, ns, name string, timeout time.Duration) {
	f.T.Helper()
	err := f.waitFor(ctx, timeout, fmt.Sprintf("pod %s/%s to be gone", ns, name), func(ctx context.Context) (bool, error) {
		_, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		f.T.Fatal(err)
	}
}

// WaitForNodeReady waits until the rig's Node exists with condition Ready=True, heartbeated
// by the nodelet this test started last (not a stale one left by an earlier test).
func (f *Framework) WaitForNodeReady(ctx context.Context, timeout time.Duration) *v1.Node {
	f.T.Helper()
	var node *v1.Node
	err := f.waitFor(ctx, timeout, "node "+f.Env.NodeName+" to be Ready", func(ctx context.Context) (bool, error) {
		n, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = n
		f.mu.Lock()
		since := f.lastStart.Truncate(time.Second) // heartbeats have second precision
		f.mu.Unlock()
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since), nil
			}
		}
		return false, nil
	})
	if err != nil {
		f.T.Fatal(err)
	}
	return node
}

// IsPodReady reports whether the pod has condition Ready=True.
func IsPodReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// DescribePod is a one-paragraph summary of a pod's status for failure messages.
func DescribePod(p *v1.Pod) string {
	if p == nil {
		return "<no pod>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s uid=%s phase=%s reason=%q message=%q deletion=%v", p.Namespace, p.Name, p.UID,
		p.Status.Phase, p.Status.Reason, p.Status.Message, p.DeletionTimestamp)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "\n  condition %s=%s %s", c.Type, c.Status, c.Reason)
	}
	for _, group := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range group {
			fmt.Fprintf(&b, "\n  container %s ready=%v restarts=%d state=%s", cs.Name, cs.Ready, cs.RestartCount, describeState(cs.State))
		}
	}
	return b.String()
}

func describeState(s v1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return fmt.Sprintf("waiting(%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(exit %d, %s: %s)", s.Terminated.ExitCode, s.Terminated.Reason, s.Terminated.Message)
	}
	return "none"
}

// nsNameRE matches what may not appear in a namespace name.
func nsNameRE() *regexp.Regexp { return regexp.MustCompile(`[^a-z0-9-]+`) }

// NamespacePrefix turns a test name into a namespace generateName prefix.
func NamespacePrefix(testName string) string {
	s := strings.Trim(nsNameRE().ReplaceAllString(strings.ToLower(testName), "-"), "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	return "e2e-" + s + "-"
}

// NewNamespace creates a namespace for this test and waits for what pods there need: the
// default ServiceAccount and the kube-root-ca.crt ConfigMap (kube-controller-manager makes
// both). At cleanup its pods are force-deleted (the node agent may already be gone) and the
// namespace is deleted without waiting; on failure the pods are described first.
func (f *Framework) NewNamespace() string {
	f.T.Helper()
	ctx := context.Background()
	ns, err := f.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: NamespacePrefix(f.T.Name()), Labels: map[string]string{"nodelet-e2e": "true"}},
	}, metav1.CreateOptions{})
	if err != nil {
		f.T.Fatalf("creating namespace: %v", err)
	}
	name := ns.Name
	f.T.Cleanup(func() { f.deleteNamespace(name) })
	if err := f.WaitNamespaceReady(ctx, name, 60*time.Second); err != nil {
		f.T.Fatal(err)
	}
	return name
}

// WaitNamespaceReady waits until kube-controller-manager has given namespace name its default
// ServiceAccount and its kube-root-ca.crt ConfigMap, which pods in it need.
func (f *Framework) WaitNamespaceReady(ctx context.Context, name string, timeout time.Duration) error {
	return WaitFor(ctx, timeout, "ServiceAccount default and ConfigMap kube-root-ca.crt in "+name, func(ctx context.Context) (bool, error) {
		if _, err := f.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, err
		}
		if _, err := f.Client.CoreV1().ConfigMaps(name).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return false, err
		}
		return true, nil
	})
}

func (f *Framework) deleteNamespace(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := f.Client.CoreV1().Pods(name).List(ctx, metav1.ListOptions{})
	if err != nil {
		f.T.Logf("cleanup: listing pods in %s: %v", name, err)
	} else {
		for i := range pods.Items {
			p := &pods.Items[i]
			if f.T.Failed() {
				f.T.Logf("pod at cleanup: %s", DescribePod(p))
			}
			err := f.Client.CoreV1().Pods(name).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			if err != nil && !apierrors.IsNotFound(err) {
				f.T.Logf("cleanup: force-deleting pod %s/%s: %v", name, p.Name, err)
			}
		}
	}
	if f.T.Failed() {
		if evs, err := f.Client.CoreV1().Events(name).List(ctx, metav1.ListOptions{}); err == nil {
			for _, e := range evs.Items {
				f.T.Logf("event: %s %s/%s %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	err = f.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		f.T.Logf("cleanup: deleting namespace %s: %v", name, err)
	}
}

// CreatePod creates pod, bound to the rig's node when spec.nodeName is empty (the rig runs
// no scheduler).
func (f *Framework) CreatePod(ctx context.Context, pod *v1.Pod) *v1.Pod {
	f.T.Helper()
	if pod.Spec.NodeName == "" {
		pod.Spec.NodeName = f.Env.NodeName
	}
	p, err := f.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		f.T.Fatalf("creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return p
}

// DeletePod deletes a pod with the given grace period (nil: the pod's own).
func (f *Framework) DeletePod(ctx context.Context, ns, name string, grace *int64) {
	f.T.Helper()
	err := f.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: grace})
	if err != nil {
		f.T.Fatalf("deleting pod %s/%s: %v", ns, name, err)
	}
}

// BusyboxPod is a one-container ("main") pod of the rig's busybox image running command,
// with imagePullPolicy Never (there is no registry), a zero termination grace period and
// restartPolicy Always; change what the test needs.
func (f *Framework) BusyboxPod(ns, name string, command ...string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{
				Name:            "main",
				Image:           f.Env.BusyboxImage,
				ImagePullPolicy: v1.PullNever,
				Command:         command,
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
}
