//go:build e2e

package e2e

import (
	"context"
	"net"
	"os"
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
