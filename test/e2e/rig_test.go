//go:build e2e

package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestRigControlPlane: the admin credential works, the node credential is the node's
// identity and is refused what the Node authorizer does not allow, and a namespace gets what
// pods need from kube-controller-manager.
func TestRigControlPlane(t *testing.T) {
	f := framework.New(t)
	ctx := t.Context()

	nss, err := f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("admin listing namespaces: %v", err)
	}
	var names []string
	for _, ns := range nss.Items {
		names = append(names, ns.Name)
	}
	for _, want := range []string{"default", "kube-system", "kube-node-lease"} {
		if !slices.Contains(names, want) {
			t.Errorf("namespace %q missing; have %v", want, names)
		}
	}

	node := f.NodeClient()
	ssr, err := node.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node credential SelfSubjectReview: %v", err)
	}
	if got, want := ssr.Status.UserInfo.Username, "system:node:"+f.Env.NodeName; got != want {
		t.Errorf("node credential is user %q, want %q", got, want)
	}
	if !slices.Contains(ssr.Status.UserInfo.Groups, "system:nodes") {
		t.Errorf("node credential groups %v lack system:nodes", ssr.Status.UserInfo.Groups)
	}
	_, err = node.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node credential listing secrets in kube-system: err = %v, want Forbidden", err)
	}

	ns := f.NewNamespace()
	// Without a node agent the pod stays Pending, but creating it proves admission (the
	// ServiceAccount admission plugin needs the default ServiceAccount) accepts pods here.
	pod := f.CreatePod(ctx, f.BusyboxPod(ns, "pending", "sleep", "3600"))
	if pod.Spec.NodeName != f.Env.NodeName {
		t.Errorf("pod bound to %q, want %q", pod.Spec.NodeName, f.Env.NodeName)
	}
	var hasToken bool
	for _, vol := range pod.Spec.Volumes {
		if vol.Projected != nil && strings.HasPrefix(vol.Name, "kube-api-access-") {
			hasToken = true
		}
	}
	if !hasToken {
		t.Errorf("pod has no kube-api-access projected volume: %+v", pod.Spec.Volumes)
	}
	f.DeletePod(ctx, ns, pod.Name, new(int64))
	f.WaitForPodGone(ctx, ns, pod.Name, 30*time.Second)
}

// TestRigRuntime: containerd answers CRI on the rig's socket with the local images, and runs
// a host-network and a CNI-network pod of busybox.
func TestRigRuntime(t *testing.T) {
	f := framework.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	v, err := f.CRI.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != "containerd" || v.RuntimeApiVersion != "v1" {
		t.Errorf("runtime %s (CRI %s), want containerd with CRI v1", v.RuntimeName, v.RuntimeApiVersion)
	}
	tags, err := f.CRI.ImageTags(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{f.Env.BusyboxImage, f.Env.PauseImage} {
		if !slices.Contains(tags, want) {
			t.Errorf("image %s not in the runtime; have %v", want, tags)
		}
	}

	if _, err := f.CRI.RemoveAllPodSandboxes(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := f.CRI.RemoveAllPodSandboxes(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	for _, tc := range []struct {
		name        string
		hostNetwork bool
	}{{"hostnet", true}, {"cni", false}} {
		t.Run(tc.name, func(t *testing.T) {
			logDir := t.TempDir()
			sb, ctr, err := f.CRI.RunBusyboxPod(ctx, "rig-"+tc.name, f.Env.BusyboxImage, logDir, tc.hostNetwork,
				"sh", "-c", "echo hello from $(hostname)")
			if err != nil {
				t.Fatal(err)
			}
			var st *runtimeapi.ContainerStatus
			err = framework.WaitFor(ctx, 30*time.Second, "container to exit", func(ctx context.Context) (bool, error) {
				r, err := f.CRI.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
				if err != nil {
					return false, err
				}
				st = r.Status
				return st.State == runtimeapi.ContainerState_CONTAINER_EXITED, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if st.ExitCode != 0 {
				t.Errorf("exit code %d, want 0", st.ExitCode)
			}
			logb, err := os.ReadFile(filepath.Join(logDir, "rig-"+tc.name+".log"))
			if err != nil {
				t.Fatalf("reading container log: %v", err)
			}
			// CRI log format: <time> stdout F <line>
			if !strings.Contains(string(logb), " stdout F hello from ") {
				t.Errorf("container log %q lacks the CRI-format line", logb)
			}
			sst, err := f.CRI.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})
			if err != nil {
				t.Fatal(err)
			}
			ip := sst.GetStatus().GetNetwork().GetIp()
			if !tc.hostNetwork {
				_, podNet, err := net.ParseCIDR(f.Env.PodCIDR)
				if err != nil {
					t.Fatalf("rig env POD_CIDR: %v", err)
				}
				if !podNet.Contains(net.ParseIP(ip)) {
					t.Errorf("CNI pod IP %q, want one from %s", ip, podNet)
				}
			}
		})
	}
}

// TestRigCleanupDeletesLeakedTask: containerd can keep a task for a container CRI reports as
// not running (a start cut off after the task existed) and then refuses its removal through
// CRI, "cannot delete running task". The framework's cleanup gets past it with ctr, so one
// test's leak does not fail every later test's set-up. The leak is made here with ctr
// starting a task behind CRI's back.
func TestRigCleanupDeletesLeakedTask(t *testing.T) {
	f := framework.New(t)
	if f.Env.Ctr == "" {
		t.Fatal("rig.env has no CTR")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := f.CRI.RemoveAllPodSandboxes(ctx); err != nil {
		t.Fatal(err)
	}
	_, ctr, err := f.CRI.CreateBusyboxPod(ctx, "rig-leak", f.Env.BusyboxImage, t.TempDir(), true, "sleep", "3600")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, f.Env.Ctr, "tasks", "start", "--detach", "--null-io", ctr).CombinedOutput(); err != nil {
		t.Fatalf("starting a task behind CRI's back: %v: %s", err, out)
	}
	tasks, err := f.CRI.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tasks[ctr] == "" {
		t.Fatalf("no task for container %s after ctr started one; tasks %v", ctr, tasks)
	}
	// The leak as CRI shows it: the container is not running, and its removal is refused.
	st, err := f.CRI.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("CRI reports the container running; the leak was not made")
	}
	_, err = f.CRI.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr})
	if framework.LeakedTaskID(err) != ctr {
		t.Fatalf("RemoveContainer over CRI: %v, want containerd's refusal for the task it keeps", err)
	}

	if _, err := f.CRI.RemoveAllPodSandboxes(ctx); err != nil {
		t.Fatalf("cleanup with a leaked task: %v", err)
	}
	if tasks, err = f.CRI.Tasks(ctx); err != nil {
		t.Fatal(err)
	} else if tasks[ctr] != "" {
		t.Errorf("task %s still there after the cleanup: %s", ctr, tasks[ctr])
	}
	if ctrs, err := f.CRI.Containers(ctx, nil); err != nil {
		t.Fatal(err)
	} else if len(ctrs) != 0 {
		t.Errorf("%d containers left after the cleanup", len(ctrs))
	}
}
