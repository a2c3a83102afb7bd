//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// kubeadmHostPaths are the fixed host paths kubeadm join writes and kubeadm reset cleans
// (/var/lib/etcd too: on a node without kubeadm's etcd manifest, reset empties that default
// data directory), and /etc/default/kubelet, which the drop-in reads: the test owns them for
// its duration.
var kubeadmHostPaths = []string{"/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd", "/etc/default/kubelet"}

// standardKubeadmDropIn is the kubelet packages' drop-in for kubeadm
// (/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf, from kubernetes/release), used
// when the repo has no deploy/10-kubeadm.conf.
const standardKubeadmDropIn = `# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`

// TestKubeadmJoin joins nodelet to the rig's cluster with the real kubeadm v1.37.2, as a node
// joins a kubeadm cluster: the control plane gets what "kubeadm init" uploads (kubeadm-config
// and kubelet-config ConfigMaps, cluster-info, the bootstrap RBAC) and a token; "kubeadm join"
// runs its preflight (with nodelet as the `kubelet` on PATH), writes the kubelet's files and
// waits for the TLS bootstrap while nodelet runs from the kubeadm drop-in's ExecStart; the
// node's client CSR is auto-approved by kube-controller-manager, the Node goes Ready with
// nodelet's version, and a pod runs. "kubeadm reset" then leaves the node clean.
func TestKubeadmJoin(t *testing.T) {
	f := framework.New(t)
	ctx := t.Context()
	began := time.Now()
	kubeadm := f.RigBin("kubeadm")
	nodeletBin := os.Getenv("NODELET_BIN")
	if nodeletBin == "" {
		t.Fatal("NODELET_BIN is not set: point it at the nodelet binary")
	}
	nodeletBin, err := filepath.Abs(nodeletBin)
	if err != nil {
		t.Fatal(err)
	}
	apiURL, err := url.Parse(f.Env.APIServerURL)
	if err != nil || apiURL.Host == "" {
		t.Fatalf("rig.env APISERVER_URL %q: %v", f.Env.APIServerURL, err)
	}
	_, apiPort, err := net.SplitHostPort(apiURL.Host)
	if err != nil {
		t.Fatalf("APISERVER_URL %q has no port: %v", f.Env.APIServerURL, err)
	}
	// Its own node name: a Node left Ready by an earlier test would make kubeadm refuse to
	// join under that name (the rig runs no node lifecycle controller to mark it NotReady).
	node := f.Env.NodeName + "-kubeadm"

	claimHostPaths(t)
	if err := os.MkdirAll(f.Env.NodeletRootBase, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(f.Env.NodeletRootBase, "kubeadm-join-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		} else {
			t.Logf("keeping %s for inspection", dir)
		}
	})

	// nodelet as the node's `kubelet`, first on PATH, as the package's /usr/bin/kubelet is.
	binDir := filepath.Join(dir, "bin")
	kubeletLink := filepath.Join(binDir, "kubelet")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(nodeletBin, kubeletLink); err != nil {
		t.Fatal(err)
	}
	pathEnv := "PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH")
	verOut, err := exec.CommandContext(ctx, kubeletLink, "--version").Output()
	if err != nil {
		t.Fatalf("kubelet --version: %v", err)
	}
	kubeletVersion := strings.TrimPrefix(strings.TrimSpace(string(verOut)), "Kubernetes ")
	t.Logf("`kubelet --version` (nodelet): %s", strings.TrimSpace(string(verOut)))

	// A clean node: no sandboxes in the runtime, no Node of that name.
	if n, err := f.CRI.RemoveAllPodSandboxes(ctx); err != nil {
		t.Fatalf("clearing the runtime: %v", err)
	} else if n > 0 {
		t.Logf("removed %d pod sandboxes left by an earlier test", n)
	}
	deleteNodeAndLease(ctx, t, f.Client, node)
	t.Cleanup(func() { deleteNodeAndLease(context.Background(), t, f.Client, node) })
	if ln, err := net.Listen("tcp", net.JoinHostPort("", fmt.Sprint(f.Env.NodeletPort))); err != nil {
		t.Fatalf("the rig's node agent port %d is in use (another node agent runs?): %v", f.Env.NodeletPort, err)
	} else {
		ln.Close()
	}

	// (1) What "kubeadm init" uploads, fitted to the rig.
	kubeadmVersion := strings.TrimSpace(runKubeadm(ctx, t, kubeadm, nil, "version", "-o", "short"))
	cfgPath := filepath.Join(dir, "kubeadm-init.yaml")
	podLogs := filepath.Join(dir, "pod-logs")
	writeKubeadmInitConfig(t, f, cfgPath, kubeadmVersion, apiPort, node, podLogs)
	undo := recordClusterObjects(ctx, t, f.Client)
	t.Cleanup(func() { undo(context.Background()) })
	runKubeadm(ctx, t, kubeadm, nil, "init", "phase", "upload-config", "all", "--config", cfgPath, "--kubeconfig", f.Env.Kubeconfig)
	runKubeadm(ctx, t, kubeadm, nil, "init", "phase", "bootstrap-token", "--config", cfgPath, "--kubeconfig", f.Env.Kubeconfig, "--skip-token-print")
	joinCmd := strings.TrimSpace(runKubeadm(ctx, t, kubeadm, nil, "token", "create", "--kubeconfig", f.Env.Kubeconfig,
		"--ttl", "15m", "--description", "nodelet e2e TestKubeadmJoin", "--print-join-command"))
	m := regexp.MustCompile(`--token (\S+) .*--discovery-token-ca-cert-hash (\S+)`).FindStringSubmatch(joinCmd)
	if m == nil {
		t.Fatalf("kubeadm token create --print-join-command printed %q", joinCmd)
	}
	token, kubeadmHash := m[1], m[2]
	if hash := caCertHash(t, f.Env.CACert); hash != kubeadmHash {
		t.Errorf("CA cert hash: computed %s, kubeadm printed %s", hash, kubeadmHash)
	}
	tokenID, _, _ := strings.Cut(token, ".")
	// kube-controller-manager's bootstrapsigner signs cluster-info for the token; kubeadm's
	// discovery would poll for it every 5s.
	err = framework.WaitFor(ctx, 30*time.Second, "cluster-info signed for token "+tokenID, func(ctx context.Context) (bool, error) {
		cm, err := f.Client.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := cm.Data["jws-kubeconfig-"+tokenID]
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%v (does the rig's kube-controller-manager run bootstrap-signer-controller?)", err)
	}

	// (2) kubeadm join, with nodelet started from the drop-in once kubeadm has written the
	// kubelet's files ("[kubelet-start] Starting the kubelet": where systemd would restart it).
	ignored := ignoredPreflightChecks(t, f)
	joinArgs := []string{"join", net.JoinHostPort(apiURL.Hostname(), apiPort),
		"--token", token, "--discovery-token-ca-cert-hash", kubeadmHash,
		"--node-name", node, "--cri-socket", f.Env.ContainerRuntimeEndpoint}
	if len(ignored) > 0 {
		var names []string
		for _, c := range ignored {
			names = append(names, c.name)
		}
		joinArgs = append(joinArgs, "--ignore-preflight-errors="+strings.Join(names, ","))
	}
	dropIn := loadKubeadmDropIn(t)
	csrs := watchCSRs(t, f, false)
	joinCtx, cancelJoin := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelJoin()
	join := startKubeadm(joinCtx, t, kubeadm, []string{pathEnv}, joinArgs...)
	tJoin := time.Now()
	// At cleanup, whatever failed: nodelet stopped, then the runtime and the pod's cgroups
	// cleared if kubeadm reset has not run (the host paths go last, claimHostPaths).
	var agent *dropInProcess
	var podUID string
	resetDone := false
	t.Cleanup(func() {
		if agent != nil {
			agent.stop(t)
		}
		if !resetDone {
			if _, err := f.CRI.RemoveAllPodSandboxes(context.Background()); err != nil {
				t.Errorf("cleanup: clearing the runtime: %v", err)
			}
		}
		if podUID != "" {
			removePodCgroups(t, f.Env.CgroupRoot, podUID)
		}
	})
	select {
	case <-join.sawLine("[kubelet-start] Starting the kubelet"):
		agent = startFromDropIn(t, dropIn, kubeletLink, filepath.Join(dir, "nodelet.log"))
	case <-join.done:
		t.Fatalf("kubeadm join exited (%v) before starting the kubelet:\n%s", join.err, join.output())
	}
	tStarted := time.Now()
	select {
	case <-join.done:
	case <-agent.done:
		cancelJoin()
		<-join.done
		t.Fatalf("nodelet exited (%v) during kubeadm join; its log:\n%s\nkubeadm join:\n%s", agent.err, lastLines(agent.logs(), 40), join.output())
	}
	tJoined := time.Now()
	out := join.output()
	t.Logf("kubeadm %s (%s): %s:\n%s", strings.Join(redactToken(joinArgs, token), " "), kubeadmVersion, exitString(join.err), redact(out, token))
	if join.err != nil {
		t.Fatalf("kubeadm join failed: %v; nodelet log tail:\n%s", join.err, lastLines(agent.logs(), 40))
	}

	// (3) Preflight passed: no ERROR.
	if !strings.Contains(out, "[preflight] Running pre-flight checks") {
		t.Errorf("kubeadm join did not run its preflight")
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "[ERROR ") {
			t.Errorf("preflight error: %s", l)
		}
	}
	// Each check ignored for a machine fact that still holds did fail (kubeadm printed its
	// error as a warning): none is ignored for nothing.
	for _, c := range ignored {
		if c.fails != nil && c.fails() && !strings.Contains(out, "[WARNING "+c.name+"]") {
			t.Errorf("preflight check %s was ignored but did not fail: ignore it no more", c.name)
		}
	}
	t.Logf("preflight and TLS bootstrap, as kubeadm printed them:\n%s", keyJoinLines(out))
	for _, want := range []string{
		"[kubelet-start] Writing kubelet configuration to file \"/var/lib/kubelet/config.yaml\"",
		"[kubelet-start] Writing kubelet environment file with flags to file \"/var/lib/kubelet/kubeadm-flags.env\"",
		"[kubelet-check] The kubelet is healthy after",
		"[kubelet-start] Waiting for the kubelet to perform the TLS Bootstrap",
		"This node has joined the cluster",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubeadm join output lacks %q", want)
		}
	}

	// The files kubeadm wrote are those nodelet ran with.
	checkJoinFiles(t, f, node)
	if !slices.Equal(agent.args[1:], expectedKubeadmArgs(node)) {
		t.Errorf("nodelet ran with %q, want the drop-in's %q", agent.args[1:], expectedKubeadmArgs(node))
	}

	// TLS bootstrap: the CSR from the bootstrap token, approved by kcm's csrapproving.
	client := csrs.waitFor(t, "the node's client CSR to be issued", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:bootstrap:"+tokenID, "issued", 30*time.Second, 0)
	csr, err := f.Client.CertificatesV1().CertificateSigningRequests().Get(ctx, client.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	approvedBy := ""
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Status == v1.ConditionTrue {
			approvedBy = c.Reason + ": " + c.Message
		}
	}
	if !strings.HasPrefix(approvedBy, "AutoApproved:") {
		t.Errorf("client CSR %s approval %q, want kube-controller-manager's AutoApproved", csr.Name, approvedBy)
	}
	kc, err := clientcmd.BuildConfigFromFlags("", "/etc/kubernetes/kubelet.conf")
	if err != nil {
		t.Fatalf("loading /etc/kubernetes/kubelet.conf: %v", err)
	}
	cert := readPEMCertFile(t, kc.CertFile)
	if cert.Subject.CommonName != "system:node:"+node || !slices.Contains(cert.Subject.Organization, "system:nodes") {
		t.Errorf("client certificate in %s: subject %v, want CN system:node:%s O system:nodes", kc.CertFile, cert.Subject, node)
	}

	// The Node, Ready, with nodelet's version.
	var ready *v1.Node
	err = framework.WaitFor(ctx, time.Minute, "node "+node+" to be Ready", func(ctx context.Context) (bool, error) {
		if err := agent.exited(); err != nil {
			return false, &framework.StopError{Err: err}
		}
		n, err := f.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready = n
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v\nnodelet log tail:\n%s", err, lastLines(agent.logs(), 40))
	}
	tReady := time.Now()
	if got := ready.Status.NodeInfo.KubeletVersion; got != kubeletVersion {
		t.Errorf("node %s reports kubeletVersion %q, want nodelet's %q", node, got, kubeletVersion)
	}

	// A pod on it.
	ns := f.NewNamespace()
	pod := f.BusyboxPod(ns, "on-a-kubeadm-node", "sleep", "3600")
	pod.Spec.NodeName = node
	pod = f.CreatePod(ctx, pod)
	err = framework.WaitFor(ctx, time.Minute, "pod "+pod.Name+" to be Ready", func(ctx context.Context) (bool, error) {
		if err := agent.exited(); err != nil {
			return false, &framework.StopError{Err: err}
		}
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return framework.IsPodReady(p), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s\nnodelet log tail:\n%s", err, framework.DescribePod(pod), lastLines(agent.logs(), 40))
	}
	tPod := time.Now()
	uid := string(pod.UID)
	podUID = uid
	sbs, err := f.CRI.PodSandboxesOf(ctx, uid)
	if err != nil || len(sbs) == 0 {
		t.Fatalf("the pod's sandbox in the runtime: %v, %v", sbs, err)
	}
	containerID := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")

	// A restart on the joined node, as "systemctl restart kubelet" does: the bootstrap
	// kubeconfig is gone (kubeadm removed it), the drop-in still names it; nodelet runs on
	// kubelet.conf and keeps the pod's container.
	agent.stop(t)
	if err := agent.exitErr(); err != nil {
		t.Errorf("nodelet's exit on SIGTERM: %v", err)
	}
	restarted := time.Now()
	agent = startFromDropIn(t, dropIn, kubeletLink, filepath.Join(dir, "nodelet.log"))
	err = framework.WaitFor(ctx, 30*time.Second, "the node's Lease renewed after the restart", func(ctx context.Context) (bool, error) {
		if err := agent.exited(); err != nil {
			return false, &framework.StopError{Err: err}
		}
		l, err := f.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, err
		}
		return l.Spec.RenewTime.After(restarted), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tRestarted := time.Now()
	ctrs, err := f.CRI.PodContainers(ctx, uid)
	if err != nil || len(ctrs) != 1 || ctrs[0].Id != containerID || ctrs[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the pod's containers after the restart: %v (%v), want only %s, running", ctrs, err, containerID)
	}

	// kubeadm reset stops the kubelet service first ("systemctl stop kubelet"); with no
	// systemd it cannot, and says to stop it by hand: that is done here, as systemd would
	// (SIGTERM). The pod's sandbox is left running, for reset to remove.
	agent.stop(t)
	if err := agent.exitErr(); err != nil {
		t.Errorf("nodelet's exit on SIGTERM: %v", err)
	}
	resetOut := runKubeadm(ctx, t, kubeadm, []string{pathEnv}, "reset", "--force", "--cri-socket", f.Env.ContainerRuntimeEndpoint)
	resetDone = true
	tReset := time.Now()
	if left, err := f.CRI.PodSandboxesOf(ctx, uid); err != nil || len(left) > 0 {
		t.Errorf("sandboxes of the pod left after kubeadm reset: %d (%v)", len(left), err)
	}
	if left, err := f.CRI.PodContainers(ctx, uid); err != nil || len(left) > 0 {
		t.Errorf("containers of the pod left after kubeadm reset: %d (%v)", len(left), err)
	}
	for _, p := range []string{"/etc/kubernetes/kubelet.conf", "/etc/kubernetes/bootstrap-kubelet.conf", "/etc/kubernetes/pki/ca.crt"} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after kubeadm reset: %v (want it removed)", p, err)
		}
	}
	if names, err := dirNames("/var/lib/kubelet"); err != nil || len(names) > 0 {
		t.Errorf("/var/lib/kubelet after kubeadm reset holds %v (%v), want it empty", names, err)
	}
	if mps, err := mountutil.PointsUnder("/var/lib/kubelet"); err != nil || len(mps) > 0 {
		t.Errorf("mounts under /var/lib/kubelet after kubeadm reset: %v (%v)", mps, err)
	}
	if !strings.Contains(resetOut, "[reset] Deleting contents of directories") {
		t.Errorf("kubeadm reset did not clean the directories:\n%s", resetOut)
	}

	ms := func(at time.Time) string { return fmt.Sprintf("%5.1fs", at.Sub(began).Seconds()) }
	t.Logf("timeline: kubeadm join started %s, nodelet started %s, join done %s (%.1fs), client CSR %s issued, Node Ready %s, pod Ready %s, restarted nodelet renewed the Lease %s (%.1fs after the restart), reset done %s",
		ms(tJoin), ms(tStarted), ms(tJoined), tJoined.Sub(tJoin).Seconds(), client.name, ms(tReady), ms(tPod), ms(tRestarted), tRestarted.Sub(restarted).Seconds(), ms(tReset))
}

// claimHostPaths makes sure the fixed paths kubeadm writes hold nothing the test did not make
// but empty directories (another test's mount point, /var/lib/kubelet/device-plugins, may be
// there), and at cleanup removes what the test made (unmounting anything under
// /var/lib/kubelet) and puts those empty directories back.
func claimHostPaths(t *testing.T) {
	t.Helper()
	for _, p := range kubeadmHostPaths {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Made by the test: removed whole.
			t.Cleanup(func() {
				if _, err := mountutil.UnmountAndRemoveAll(p); err != nil {
					t.Errorf("cleanup: removing %s: %v", p, err)
				}
			})
			continue
		case err != nil:
			t.Fatal(err)
		case !fi.IsDir():
			t.Fatalf("%s exists (%v): TestKubeadmJoin writes it and needs the machine without it; move it away (if an interrupted run of this test left it, `kubeadm reset --force` and removing it is safe)", p, fi.Mode())
		}
		if mps, err := mountutil.PointsUnder(p); err != nil || len(mps) > 0 {
			t.Fatalf("%s has mounts %v (%v): TestKubeadmJoin needs it unused", p, mps, err)
		}
		type emptyDir struct {
			path string
			mode fs.FileMode
		}
		var dirs []emptyDir
		var other []string
		err = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if q == p {
				return nil
			}
			if !d.IsDir() {
				other = append(other, q)
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			dirs = append(dirs, emptyDir{q, info.Mode().Perm()})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(other) > 0 {
			t.Fatalf("%s holds %v: TestKubeadmJoin writes there and needs nothing but empty directories in it; move them away (if an interrupted run of this test left them, `kubeadm reset --force` and removing them is safe)", p, other)
		}
		if len(dirs) > 0 {
			t.Logf("%s holds empty directories, put back at cleanup: %v", p, dirs)
		}
		t.Cleanup(func() {
			names, _ := dirNames(p)
			for _, n := range names {
				if _, err := mountutil.UnmountAndRemoveAll(filepath.Join(p, n)); err != nil {
					t.Errorf("cleanup: removing %s: %v", filepath.Join(p, n), err)
				}
			}
			for _, d := range dirs {
				if err := os.Mkdir(d.path, d.mode); err != nil {
					t.Errorf("cleanup: putting back %s: %v", d.path, err)
				}
			}
		})
	}
}

func dirNames(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names, nil
}

func deleteNodeAndLease(ctx context.Context, t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	if err := c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting node %s: %v", node, err)
	}
	if err := c.CoordinationV1().Leases("kube-node-lease").Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting lease %s: %v", node, err)
	}
}

// writeKubeadmInitConfig writes the InitConfiguration, ClusterConfiguration and
// KubeletConfiguration that "kubeadm init" would have been given for the rig.
func writeKubeadmInitConfig(t *testing.T, f *framework.Framework, path, version, apiPort, node, podLogs string) {
	t.Helper()
	e := f.Env
	serviceCIDR := e.All["SERVICE_CIDR"]
	if serviceCIDR == "" {
		t.Fatal("rig.env has no SERVICE_CIDR")
	}
	nodeIP := e.All["NODE_IP"]
	if nodeIP == "" {
		t.Fatal("rig.env has no NODE_IP")
	}
	var kubelet strings.Builder
	fmt.Fprintf(&kubelet, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The rig has no systemd: the runtime's cgroup driver is cgroupfs.
cgroupDriver: cgroupfs
failSwapOn: false
# The rig's host has cgroup v1 (hybrid) and cannot have v2.
failCgroupV1: false
containerRuntimeEndpoint: %q
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
# As the e2e framework's: how full the machine's disk is must not make GC take the rig's images.
imageGCHighThresholdPercent: 100
# Pod logs in the test's directory, not the host's /var/log/pods (kubeadm reset leaves logs).
podLogsDir: %q
`, e.ContainerRuntimeEndpoint, e.NodeletPort, e.NodeletHealthzPort, podLogs)
	if e.CgroupRoot != "" {
		fmt.Fprintf(&kubelet, "cgroupRoot: %q\n", e.CgroupRoot)
	}
	cfg := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- description: nodelet e2e TestKubeadmJoin (init)
  ttl: 15m0s
  usages: [signing, authentication]
  groups: [system:bootstrappers:kubeadm:default-node-token]
# Not the rig's apiserver's 127.0.0.1 (kubeadm refuses a loopback advertise address); the
# phases run here do not use it.
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: %s
nodeRegistration:
  name: %q
  criSocket: %q
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %s
controlPlaneEndpoint: %q
networking:
  serviceSubnet: %q
  podSubnet: %q
  dnsDomain: cluster.local
---
%s`, nodeIP, apiPort, node, e.ContainerRuntimeEndpoint, version, net.JoinHostPort("127.0.0.1", apiPort), serviceCIDR, e.PodCIDR, kubelet.String())
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubeadm init configuration (%s):\n%s", path, cfg)
}

// clusterObject is an object "kubeadm init phase upload-config/bootstrap-token" or
// "kubeadm token create" may create.
type clusterObject struct {
	kind, ns, name string
}

// kubeadmObjects lists what kubeadm's init phases and token create make (kubeadm v1.37.2:
// phases/uploadconfig, phases/kubelet, phases/bootstraptoken/{node,clusterinfo}): the
// ConfigMaps by name, the RBAC objects named "kubeadm:*", the bootstrap token Secrets.
func kubeadmObjects(ctx context.Context, c kubernetes.Interface) (map[clusterObject]bool, error) {
	objs := map[clusterObject]bool{}
	for _, ns := range []string{"kube-system", "kube-public"} {
		cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range cms.Items {
			if slices.Contains([]string{"kubeadm-config", "kubelet-config", "cluster-info"}, o.Name) {
				objs[clusterObject{"ConfigMap", ns, o.Name}] = true
			}
		}
		roles, err := c.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range roles.Items {
			objs[clusterObject{"Role", ns, o.Name}] = true
		}
		rbs, err := c.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range rbs.Items {
			objs[clusterObject{"RoleBinding", ns, o.Name}] = true
		}
	}
	crs, err := c.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range crs.Items {
		objs[clusterObject{"ClusterRole", "", o.Name}] = true
	}
	crbs, err := c.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range crbs.Items {
		objs[clusterObject{"ClusterRoleBinding", "", o.Name}] = true
	}
	secrets, err := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
	if err != nil {
		return nil, err
	}
	for _, o := range secrets.Items {
		objs[clusterObject{"Secret", "kube-system", o.Name}] = true
	}
	for o := range objs {
		if (o.kind != "ConfigMap" && o.kind != "Secret") && !strings.HasPrefix(o.name, "kubeadm:") {
			delete(objs, o)
		}
	}
	return objs, nil
}

func deleteObject(ctx context.Context, c kubernetes.Interface, o clusterObject) error {
	opts := metav1.DeleteOptions{}
	switch o.kind {
	case "ConfigMap":
		return c.CoreV1().ConfigMaps(o.ns).Delete(ctx, o.name, opts)
	case "Secret":
		return c.CoreV1().Secrets(o.ns).Delete(ctx, o.name, opts)
	case "Role":
		return c.RbacV1().Roles(o.ns).Delete(ctx, o.name, opts)
	case "RoleBinding":
		return c.RbacV1().RoleBindings(o.ns).Delete(ctx, o.name, opts)
	case "ClusterRole":
		return c.RbacV1().ClusterRoles().Delete(ctx, o.name, opts)
	case "ClusterRoleBinding":
		return c.RbacV1().ClusterRoleBindings().Delete(ctx, o.name, opts)
	}
	return fmt.Errorf("unknown kind %s", o.kind)
}

// recordClusterObjects notes kubeadm's objects that exist now; the returned func deletes
// those made since (the rig's own kubeadm-style bootstrap RBAC and token stay).
func recordClusterObjects(ctx context.Context, t *testing.T, c kubernetes.Interface) func(context.Context) {
	t.Helper()
	before, err := kubeadmObjects(ctx, c)
	if err != nil {
		t.Fatalf("listing kubeadm's objects: %v", err)
	}
	return func(ctx context.Context) {
		after, err := kubeadmObjects(ctx, c)
		if err != nil {
			t.Errorf("cleanup: listing kubeadm's objects: %v", err)
			return
		}
		var made []string
		for o := range after {
			if before[o] {
				continue
			}
			made = append(made, o.kind+" "+strings.TrimPrefix(o.ns+"/"+o.name, "/"))
			if err := deleteObject(ctx, c, o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: deleting %s %s/%s: %v", o.kind, o.ns, o.name, err)
			}
		}
		slices.Sort(made)
		t.Logf("cleanup: deleted what kubeadm made: %s", strings.Join(made, ", "))
	}
}

// caCertHash is kubeadm's --discovery-token-ca-cert-hash of a CA: sha256 of its
// SubjectPublicKeyInfo.
func caCertHash(t *testing.T, caFile string) string {
	t.Helper()
	ca := readPEMCertFile(t, caFile)
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ignoredCheck is a kubeadm preflight check ignored because of a fact of this machine.
type ignoredCheck struct {
	name string
	// fails reports whether the fact that makes the check fail holds now (nil: the check
	// may or may not fail, see ignoredPreflightChecks).
	fails func() bool
}

func cgroupV1() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type != unix.CGROUP2_SUPER_MAGIC
}

func noIPv4Forwarding() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	return err == nil && strings.TrimSpace(string(b)) != "1"
}

func swapOn() bool {
	b, err := os.ReadFile("/proc/swaps")
	return err == nil && len(strings.Split(strings.TrimSpace(string(b)), "\n")) > 1
}

// ignoredPreflightChecks names the preflight checks that fail because of this machine, each
// only when the machine fact that makes it fail holds.
func ignoredPreflightChecks(t *testing.T, f *framework.Framework) []ignoredCheck {
	t.Helper()
	var ignored []ignoredCheck
	if cgroupV1() {
		// cgroup v1 (here hybrid: v1 holds every controller, and cannot be v2): for a kubelet
		// >= 1.35 the CgroupsValidator of SystemVerification makes this an error ("cgroups v1
		// support is deprecated ... you must set ... 'FailCgroupV1' to 'false'. You must also
		// explicitly skip this validation"); the kubelet-config sets failCgroupV1: false.
		ignored = append(ignored, ignoredCheck{"SystemVerification", cgroupV1})
	}
	if noIPv4Forwarding() {
		// The machine does not forward IPv4 (the rig's bridge CNI plugin turns it on with the
		// first pod on the bridge), and the test does not turn it on for the whole host: the
		// rig is one node with no kube-proxy, nothing here routes between nodes.
		ignored = append(ignored, ignoredCheck{"FileContent--proc-sys-net-ipv4-ip_forward", noIPv4Forwarding})
	}
	if swapOn() {
		// The machine has swap on; the kubelet-config sets failSwapOn: false.
		ignored = append(ignored, ignoredCheck{"Swap", swapOn})
	}
	if f.Env.NodeletPort != 10250 {
		// The check is for the kubelet's default port, 10250; this rig's node agent serves on
		// NODELET_PORT (checked free above), and 10250 may be another rig's node agent's.
		ignored = append(ignored, ignoredCheck{"Port-10250", nil})
	}
	var names []string
	for _, c := range ignored {
		names = append(names, c.name)
	}
	t.Logf("preflight checks ignored on this machine: %v", names)
	return ignored
}

// runKubeadm runs kubeadm to completion, logs its output and fails the test if it fails. It
// returns stdout.
func runKubeadm(ctx context.Context, t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	shown := strings.Join(args, " ")
	t.Logf("kubeadm %s: %s\nstdout:\n%s\nstderr:\n%s", shown, exitString(err), redactJoinCommand(stdout.String()), stderr.String())
	if err != nil {
		t.Fatalf("kubeadm %s failed: %v", shown, err)
	}
	return stdout.String()
}

var tokenRE = regexp.MustCompile(`\b([a-z0-9]{6})\.[a-z0-9]{16}\b`)

// redactJoinCommand hides token secrets in logged output.
func redactJoinCommand(s string) string { return tokenRE.ReplaceAllString(s, "$1.<secret>") }

func redact(s, token string) string {
	id, _, _ := strings.Cut(token, ".")
	return strings.ReplaceAll(s, token, id+".<secret>")
}

func redactToken(args []string, token string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = redact(a, token)
	}
	return out
}

// kubeadmRun is a kubeadm process whose combined output is read line by line.
type kubeadmRun struct {
	mu      sync.Mutex
	buf     strings.Builder
	waiters map[string]chan struct{}
	done    chan struct{}
	err     error
}

func startKubeadm(ctx context.Context, t *testing.T, bin string, env []string, args ...string) *kubeadmRun {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	r := &kubeadmRun{waiters: map[string]chan struct{}{}, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kubeadm: %v", err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.buf.WriteString(line + "\n")
			for s, ch := range r.waiters {
				if strings.Contains(line, s) {
					close(ch)
					delete(r.waiters, s)
				}
			}
			r.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-scanned
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		close(r.done)
	}()
	t.Cleanup(func() { <-r.done })
	return r
}

// sawLine is closed once a line containing s has been printed (s registered before the line).
func (r *kubeadmRun) sawLine(s string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(r.buf.String(), s) {
		close(ch)
		return ch
	}
	r.waiters[s] = ch
	return ch
}

func (r *kubeadmRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// keyJoinLines are kubeadm join's lines about the preflight and the TLS bootstrap.
func keyJoinLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		for _, p := range []string{"[preflight]", "[WARNING", "[ERROR", "[kubelet-start]", "[kubelet-check]", "This node has joined", "Certificate signing request"} {
			if strings.Contains(l, p) {
				keep = append(keep, l)
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}

// kubeadmDropIn is the kubelet's drop-in for kubeadm and where it came from.
type kubeadmDropIn struct {
	*framework.DropIn
	source string
}

// kubeadmDropInPaths are where the repo may hold the kubelet's drop-in for kubeadm.
var kubeadmDropInPaths = []string{"deploy/10-kubeadm.conf", "deploy/kubelet.service.d/10-kubeadm.conf"}

// loadKubeadmDropIn reads the repo's 10-kubeadm.conf if there is one, else the kubelet
// packages' standard drop-in.
func loadKubeadmDropIn(t *testing.T) *kubeadmDropIn {
	t.Helper()
	src, text := "kubeadm's standard 10-kubeadm.conf", standardKubeadmDropIn
	for _, p := range kubeadmDropInPaths {
		b, err := os.ReadFile(filepath.Join("..", "..", p))
		if err == nil {
			src, text = p, string(b)
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	d, err := framework.ParseDropIn(text)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	t.Logf("the kubelet's command line from %s: ExecStart=%s", src, d.ExecStart)
	return &kubeadmDropIn{DropIn: d, source: src}
}

// expectedKubeadmArgs is the kubelet's command line on a kubeadm worker joined as node, with
// nothing in /etc/default/kubelet.
func expectedKubeadmArgs(node string) []string {
	return []string{
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml", "--hostname-override=" + node,
	}
}

// dropInProcess is nodelet started from the drop-in.
type dropInProcess struct {
	cmd  *exec.Cmd
	args []string
	log  string
	done chan struct{}
	err  error
	once sync.Once
}

func startFromDropIn(t *testing.T, d *kubeadmDropIn, bin, logPath string) *dropInProcess {
	t.Helper()
	args, env, err := d.CommandLine(bin)
	if err != nil {
		t.Fatalf("%s: %v", d.source, err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== %s test: starting %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %v: %v", args, err)
	}
	t.Logf("started nodelet as the drop-in's ExecStart would: %s", strings.Join(args, " "))
	p := &dropInProcess{cmd: cmd, args: args, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(logf, "=== %s test: exited: %v\n", time.Now().UTC().Format(time.RFC3339Nano), exitString(p.err))
		logf.Close()
		close(p.done)
	}()
	return p
}

func (p *dropInProcess) logs() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("<reading %s: %v>", p.log, err)
	}
	return string(b)
}

// exited is an error when the process has exited (it must not, until stopped).
func (p *dropInProcess) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("nodelet exited (%s); log tail:\n%s", exitString(p.err), lastLines(p.logs(), 40))
	default:
		return nil
	}
}

func (p *dropInProcess) exitErr() error {
	<-p.done
	return p.err
}

// stop sends SIGTERM, as systemd's stop does, and waits; after 30s it kills.
func (p *dropInProcess) stop(t *testing.T) {
	p.once.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Errorf("nodelet did not exit within 30s of SIGTERM; killing it")
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("nodelet log tail (%s):\n%s", p.log, lastLines(p.logs(), 60))
		}
	})
}

// checkJoinFiles checks what kubeadm join wrote for the kubelet.
func checkJoinFiles(t *testing.T, f *framework.Framework, node string) {
	t.Helper()
	ca, err := os.ReadFile("/etc/kubernetes/pki/ca.crt")
	if err != nil {
		t.Errorf("the cluster CA kubeadm join writes: %v", err)
	} else if rig, _ := os.ReadFile(f.Env.CACert); !bytes.Equal(bytes.TrimSpace(ca), bytes.TrimSpace(rig)) {
		t.Errorf("/etc/kubernetes/pki/ca.crt is not the rig's CA %s", f.Env.CACert)
	}
	if _, err := os.Stat("/etc/kubernetes/bootstrap-kubelet.conf"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/etc/kubernetes/bootstrap-kubelet.conf after the join: %v (kubeadm removes it once the kubelet has bootstrapped)", err)
	}
	cfg, err := os.ReadFile("/var/lib/kubelet/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"cgroupDriver: cgroupfs", "failCgroupV1: false", "failSwapOn: false", "rotateCertificates: true",
		fmt.Sprintf("containerRuntimeEndpoint: %s", f.Env.ContainerRuntimeEndpoint),
		fmt.Sprintf("healthzPort: %d", f.Env.NodeletHealthzPort), fmt.Sprintf("port: %d", f.Env.NodeletPort),
	} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("/var/lib/kubelet/config.yaml (from the kubelet-config ConfigMap) lacks %q:\n%s", want, cfg)
		}
	}
	flags, err := framework.ReadEnvFile("/var/lib/kubelet/kubeadm-flags.env")
	if err != nil {
		t.Fatal(err)
	}
	if got := flags["KUBELET_KUBEADM_ARGS"]; got != "--hostname-override="+node {
		t.Errorf("kubeadm-flags.env KUBELET_KUBEADM_ARGS=%q, want --hostname-override=%s", got, node)
	}
	inst, err := os.ReadFile("/var/lib/kubelet/instance-config.yaml")
	if err != nil {
		t.Errorf("instance-config.yaml: %v", err)
	} else if !strings.Contains(string(inst), f.Env.ContainerRuntimeEndpoint) {
		t.Errorf("instance-config.yaml %q lacks the --cri-socket", inst)
	}
	t.Logf("kubeadm wrote /var/lib/kubelet/config.yaml:\n%s\nkubeadm-flags.env: KUBELET_KUBEADM_ARGS=%q; instance-config.yaml: %s",
		cfg, flags["KUBELET_KUBEADM_ARGS"], strings.TrimSpace(string(inst)))
}

// removePodCgroups removes the pod's empty cgroup directories that nodelet made and could
// not remove (kubeadm reset removed the sandbox while nodelet was stopped).
func removePodCgroups(t *testing.T, cgroupRoot, uid string) {
	hiers, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hiers {
		base := filepath.Join(h, cgroupRoot, "kubepods")
		var dirs []string
		_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && strings.Contains(d.Name(), uid) {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Deepest first.
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Logf("cleanup: removing cgroup %s: %v", d, err)
			}
		}
	}
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
