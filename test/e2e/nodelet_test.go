//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// startNode starts nodelet and waits for its Node to be Ready.
func startNode(t *testing.T, f *framework.Framework, opts framework.NodeletOptions) *framework.Nodelet {
	t.Helper()
	user := opts.Config
	opts.Config = func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.FailCgroupV1 = ptr.To(false) // the rig's host is cgroup v1 (hybrid)
		if user != nil {
			user(c)
		}
	}
	if opts.Verbosity == 0 {
		opts.Verbosity = 2
	}
	n := f.StartNodelet(opts)
	ctx := context.Background()
	f.WaitForNodeReady(ctx, 2*time.Minute)
	return n
}

func TestNodeRegistrationAndLease(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	start := time.Now()
	startNode(t, f, framework.NodeletOptions{
		ExtraArgs: []string{"--node-labels=nodelet.io/e2e=yes,topology.example.com/rack=r1", "--register-with-taints=nodelet.io/dedicated=e2e:NoSchedule"},
		Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
			c.SystemReserved = map[string]string{"memory": "256Mi", "cpu": "100m"}
		},
	})
	t.Logf("node Ready %.1fs after start", time.Since(start).Seconds())
	node, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node: %v", err)
	}
	for k, want := range map[string]string{
		"kubernetes.io/hostname": f.Env.NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"nodelet.io/e2e": "yes", "topology.example.com/rack": "r1",
	} {
		if got := node.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	// The TaintNodesByCondition admission plugin adds node.kubernetes.io/not-ready at
	// creation (the node lifecycle controller, not run here, would lift it).
	var taints []v1.Taint
	for _, tn := range node.Spec.Taints {
		if tn.Key != "node.kubernetes.io/not-ready" {
			taints = append(taints, tn)
		}
	}
	if len(taints) != 1 || taints[0].Key != "nodelet.io/dedicated" || taints[0].Value != "e2e" || taints[0].Effect != v1.TaintEffectNoSchedule {
		t.Errorf("taints = %v, want nodelet.io/dedicated=e2e:NoSchedule", node.Spec.Taints)
	}
	capMem, allocMem := node.Status.Capacity[v1.ResourceMemory], node.Status.Allocatable[v1.ResourceMemory]
	// allocatable = capacity - systemReserved (256Mi) - evictionHard memory.available (100Mi)
	if diff := capMem.Value() - allocMem.Value(); diff != (256+100)<<20 {
		t.Errorf("capacity-allocatable memory = %d, want %d", diff, (256+100)<<20)
	}
	capCPU, allocCPU := node.Status.Capacity[v1.ResourceCPU], node.Status.Allocatable[v1.ResourceCPU]
	if capCPU.MilliValue()-allocCPU.MilliValue() != 100 {
		t.Errorf("cpu capacity %s allocatable %s, want 100m reserved", capCPU.String(), allocCPU.String())
	}
	if pods := node.Status.Capacity[v1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("pods capacity = %s, want 110", pods.String())
	}
	if _, ok := node.Status.Capacity[v1.ResourceEphemeralStorage]; !ok {
		t.Error("no ephemeral-storage capacity")
	}
	info := node.Status.NodeInfo
	if !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://") || info.KernelVersion == "" || info.OSImage == "" || info.KubeletVersion == "" || info.BootID == "" {
		t.Errorf("nodeInfo incomplete: %+v", info)
	}
	conds := map[v1.NodeConditionType]v1.NodeCondition{}
	for _, c := range node.Status.Conditions {
		conds[c.Type] = c
	}
	if c := conds[v1.NodeReady]; c.Status != v1.ConditionTrue || c.Reason != "KubeletReady" {
		t.Errorf("Ready = %s/%s, want True/KubeletReady", c.Status, c.Reason)
	}
	for typ, reason := range map[v1.NodeConditionType]string{
		v1.NodeMemoryPressure: "KubeletHasSufficientMemory", v1.NodeDiskPressure: "KubeletHasNoDiskPressure", v1.NodePIDPressure: "KubeletHasSufficientPID",
	} {
		if c := conds[typ]; c.Status != v1.ConditionFalse || c.Reason != reason {
			t.Errorf("%s = %s/%s, want False/%s", typ, c.Status, c.Reason, reason)
		}
	}
	var internal bool
	for _, a := range node.Status.Addresses {
		internal = internal || a.Type == v1.NodeInternalIP
	}
	if !internal {
		t.Errorf("no InternalIP address: %v", node.Status.Addresses)
	}
	if got := node.Status.DaemonEndpoints.KubeletEndpoint.Port; got != f.Env.NodeletPort {
		t.Errorf("kubelet endpoint port = %d, want the rig's NODELET_PORT %d", got, f.Env.NodeletPort)
	}

	// The Lease exists, is owned by the Node and is renewed every ~10s.
	var first *coordinationv1.Lease
	err = framework.WaitFor(ctx, 30*time.Second, "the node lease", func(ctx context.Context) (bool, error) {
		l, err := f.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, f.Env.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		first = l
		// The owner reference is added once the Node's UID is known.
		return len(l.OwnerReferences) == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(first.Spec.HolderIdentity, "") != f.Env.NodeName || ptr.Deref(first.Spec.LeaseDurationSeconds, 0) != 40 {
		t.Errorf("lease spec = %+v", first.Spec)
	}
	if len(first.OwnerReferences) != 1 || first.OwnerReferences[0].UID != node.UID {
		t.Errorf("lease owner = %v, want the node %s", first.OwnerReferences, node.UID)
	}
	err = framework.WaitFor(ctx, 30*time.Second, "the lease to be renewed", func(ctx context.Context) (bool, error) {
		l, err := f.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, f.Env.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if l.Spec.RenewTime.After(first.Spec.RenewTime.Time) {
			t.Logf("lease renewed after %.1fs", l.Spec.RenewTime.Sub(first.Spec.RenewTime.Time).Seconds())
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPodWithConfigMapSecretAndTokenRunsAndLogs(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"greeting": "hello-from-configmap", "mode": "e2e"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"password": "s3cr3t-value"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := f.BusyboxPod(ns, "app", "sh", "-c",
		`echo "cm=$(cat /etc/settings/greeting)"; echo "secret=$(cat /etc/creds/password)"; echo "env=$MODE $MY_POD_NAME $KUBERNETES_SERVICE_HOST";`+
			` test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token=present; cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo;`+
			` test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt && echo ca=present; echo ready; exec sleep 3600`)
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []v1.VolumeMount{{Name: "settings", MountPath: "/etc/settings"}, {Name: "creds", MountPath: "/etc/creds"}}
	c.Env = []v1.EnvVar{
		{Name: "MODE", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}, Key: "mode"}}},
		{Name: "MY_POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
	}
	c.ReadinessProbe = nil
	pod.Spec.Volumes = []v1.Volume{
		{Name: "settings", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}},
		{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}},
	}
	created := f.CreatePod(ctx, pod)
	hasToken := false
	for _, v := range created.Spec.Volumes {
		hasToken = hasToken || strings.HasPrefix(v.Name, "kube-api-access-")
	}
	if !hasToken {
		t.Fatalf("the API server did not add the kube-api-access volume: %v", created.Spec.Volumes)
	}
	start := time.Now()
	got := f.WaitForPodReady(ctx, ns, "app", 2*time.Minute)
	t.Logf("pod Ready %.2fs after creation", time.Since(start).Seconds())
	if got.Status.PodIP == "" || got.Status.HostIP == "" || got.Status.StartTime == nil {
		t.Errorf("status lacks IPs or start time: podIP=%q hostIP=%q", got.Status.PodIP, got.Status.HostIP)
	}
	cs := got.Status.ContainerStatuses[0]
	if !strings.HasPrefix(cs.ContainerID, "containerd://") || cs.ImageID == "" || cs.State.Running == nil || cs.RestartCount != 0 {
		t.Errorf("container status = %+v", cs)
	}
	for _, typ := range []v1.PodConditionType{v1.PodScheduled, v1.PodInitialized, v1.ContainersReady, v1.PodReady, v1.PodReadyToStartContainers} {
		found := false
		for _, c := range got.Status.Conditions {
			if c.Type == typ && c.Status == v1.ConditionTrue {
				found = true
			}
		}
		if !found {
			t.Errorf("condition %s is not True: %v", typ, got.Status.Conditions)
		}
	}
	// The container's output, read as `kubectl logs` would find it on the node.
	logFile := filepath.Join(n.PodLogsDir, ns+"_app_"+string(got.UID), "main", "0.log")
	var content string
	err := framework.WaitFor(ctx, 30*time.Second, "the container log "+logFile, func(context.Context) (bool, error) {
		b, err := os.ReadFile(logFile)
		content = string(b)
		return err == nil && strings.Contains(content, "ready"), nil
	})
	if err != nil {
		t.Fatalf("%v; log so far: %q", err, content)
	}
	for _, want := range []string{"stdout F cm=hello-from-configmap", "stdout F secret=s3cr3t-value", "stdout F env=e2e app 10.96.0.1", "stdout F token=present", "stdout F " + ns, "stdout F ca=present"} {
		if !strings.Contains(content, want) {
			t.Errorf("container log lacks %q:\n%s", want, content)
		}
	}
}

func TestCrashingContainerBacksOff(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	f.CreatePod(ctx, f.BusyboxPod(ns, "crasher", "sh", "-c", "echo crashing; exit 3"))
	// Record when each restart was seen; the gaps must grow (0, ~10s, ~20s).
	var seen []time.Time
	last := int32(-1)
	err := framework.WaitFor(ctx, 3*time.Minute, "three restarts", func(ctx context.Context) (bool, error) {
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "crasher", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, err
		}
		cs := p.Status.ContainerStatuses[0]
		if cs.RestartCount != last {
			last = cs.RestartCount
			seen = append(seen, time.Now())
			t.Logf("restartCount=%d state=%+v", cs.RestartCount, cs.State)
		}
		if cs.RestartCount >= 3 {
			if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3 {
				t.Errorf("lastState = %+v, want terminated with exit code 3", cs.LastTerminationState)
			}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var gaps []time.Duration
	for i := 2; i < len(seen); i++ {
		gaps = append(gaps, seen[i].Sub(seen[i-1]))
	}
	t.Logf("gaps between restarts: %v", gaps)
	if len(gaps) < 2 || gaps[0] < 8*time.Second || gaps[1] < gaps[0]+5*time.Second {
		t.Errorf("restart gaps %v do not show a growing back-off (want ~10s then ~20s)", gaps)
	}
	p := f.WaitForPod(ctx, ns, "crasher", time.Minute, "CrashLoopBackOff", func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CrashLoopBackOff"
	})
	if p.Status.Phase != v1.PodRunning {
		t.Errorf("a crash-looping pod with restartPolicy Always is Running, got %s", p.Status.Phase)
	}
}

func TestDeletionHonoursGracePeriod(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	// One container shuts down 3s after SIGTERM; one ignores SIGTERM and must be killed at the deadline.
	graceful := f.BusyboxPod(ns, "graceful", "sh", "-c", `trap 'echo got TERM; sleep 3; echo bye; exit 0' TERM; echo up; while true; do sleep 1; done`)
	graceful.Spec.TerminationGracePeriodSeconds = ptr.To[int64](20)
	stubborn := f.BusyboxPod(ns, "stubborn", "sh", "-c", `trap '' TERM; echo up; while true; do sleep 1; done`)
	stubborn.Spec.TerminationGracePeriodSeconds = ptr.To[int64](4)
	f.CreatePod(ctx, graceful)
	f.CreatePod(ctx, stubborn)
	gp := f.WaitForPodReady(ctx, ns, "graceful", 2*time.Minute)
	f.WaitForPodReady(ctx, ns, "stubborn", 2*time.Minute)

	start := time.Now()
	f.DeletePod(ctx, ns, "graceful", nil)
	f.DeletePod(ctx, ns, "stubborn", nil)
	done := map[string]time.Duration{}
	err := framework.WaitFor(ctx, time.Minute, "both pods to be gone", func(ctx context.Context) (bool, error) {
		for _, name := range []string{"graceful", "stubborn"} {
			if _, ok := done[name]; ok {
				continue
			}
			_, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				done[name] = time.Since(start)
			} else if err != nil {
				return false, err
			}
		}
		return len(done) == 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("graceful gone after %.1fs (grace 20s, exits 3s after TERM); stubborn gone after %.1fs (grace 4s, ignores TERM)", done["graceful"].Seconds(), done["stubborn"].Seconds())
	if done["graceful"] < 3*time.Second || done["graceful"] > 15*time.Second {
		t.Errorf("graceful pod gone after %v, want 3s..15s", done["graceful"])
	}
	if done["stubborn"] < 4*time.Second || done["stubborn"] > 15*time.Second {
		t.Errorf("stubborn pod gone after %v, want it killed at its 4s grace period", done["stubborn"])
	}
	logFile := filepath.Join(n.PodLogsDir, ns+"_graceful_"+string(gp.UID), "main", "0.log")
	if _, err := os.Stat(logFile); err == nil {
		t.Errorf("log dir of a deleted pod is still there: %s", logFile)
	}
	for _, uid := range []string{string(gp.UID)} {
		if list, err := f.CRI.PodSandboxesOf(ctx, uid); err != nil || len(list) != 0 {
			t.Errorf("sandboxes of deleted pod: %v (err %v)", list, err)
		}
	}
}

func TestStaticPodRunsWithMirrorPod(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	static := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "static-web", Namespace: "default"},
		Spec: v1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []v1.Container{{
				Name: "web", Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
				Command: []string{"sh", "-c", "echo static pod up; exec sleep 3600"},
			}},
		},
	}
	n := startNode(t, f, framework.NodeletOptions{StaticPods: []*v1.Pod{static}})
	name := "static-web-" + f.Env.NodeName
	mirror := f.WaitForPod(ctx, "default", name, 2*time.Minute, "a Running mirror pod", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && framework.IsPodReady(p)
	})
	if mirror.Annotations[podutil.AnnotationConfigMirror] == "" {
		t.Errorf("mirror pod lacks kubernetes.io/config.mirror: %v", mirror.Annotations)
	}
	if len(mirror.OwnerReferences) != 1 || mirror.OwnerReferences[0].Kind != "Node" {
		t.Errorf("mirror pod owner = %v, want the Node", mirror.OwnerReferences)
	}
	// Deleting the mirror pod does not stop the static pod: it is recreated.
	if err := f.Client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	f.WaitForPod(ctx, "default", name, time.Minute, "the mirror pod to come back", func(p *v1.Pod) bool {
		return p.UID != mirror.UID && p.Status.Phase == v1.PodRunning
	})
	// Removing the manifest stops the pod and removes the mirror.
	n.RemoveStaticPod("static-web")
	f.WaitForPodGone(ctx, "default", name, time.Minute)
	err := framework.WaitFor(ctx, time.Minute, "the static pod's containers to go", func(ctx context.Context) (bool, error) {
		list, err := f.CRI.Containers(ctx, map[string]string{"io.kubernetes.pod.name": name})
		if err != nil {
			return false, err
		}
		for _, c := range list {
			if c.State.String() == "CONTAINER_RUNNING" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRestartAdoptsRunningPods(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	f.CreatePod(ctx, f.BusyboxPod(ns, "steady", "sleep", "3600"))
	before := f.WaitForPodReady(ctx, ns, "steady", 2*time.Minute)
	if err := n.Stop(); err != nil {
		t.Fatalf("nodelet did not stop cleanly on SIGTERM: %v", err)
	}
	list, err := f.CRI.PodContainers(ctx, string(before.UID))
	if err != nil || len(list) != 1 || list[0].State.String() != "CONTAINER_RUNNING" {
		t.Fatalf("after SIGTERM the pod's container must keep running: %v (err %v)", list, err)
	}
	n.Restart()
	f.WaitForNodeReady(ctx, time.Minute)
	time.Sleep(5 * time.Second) // several relists and syncs after the restart
	after := f.WaitForPodReady(ctx, ns, "steady", time.Minute)
	if a, b := after.Status.ContainerStatuses[0], before.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != 0 {
		t.Errorf("container after restart = %s (restarts %d), want the same %s with 0 restarts", a.ContainerID, a.RestartCount, b.ContainerID)
	}
	list, err = f.CRI.PodContainers(ctx, string(before.UID))
	if err != nil || len(list) != 1 {
		t.Errorf("containers after restart = %v (err %v), want exactly the adopted one", list, err)
	}
	sbs, err := f.CRI.PodSandboxesOf(ctx, string(before.UID))
	if err != nil || len(sbs) != 1 {
		t.Errorf("sandboxes after restart = %d (err %v), want 1", len(sbs), err)
	}
}

func TestBadConfigIsRefused(t *testing.T) {
	bin := os.Getenv("NODELET_BIN")
	if bin == "" {
		t.Fatal("NODELET_BIN is not set")
	}
	dir := t.TempDir()
	tests := []struct {
		name, config, wantInError string
	}{
		{"unknown field", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequncy: 1m\n", "syncFrequncy"},
		{"bad duration", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: 10x\n", "syncFrequency"},
		{"gc thresholds", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 50\nimageGCLowThresholdPercent: 70\n", "imageGCLowThresholdPercent"},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tt.config), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "--config="+path).CombinedOutput()
			if err == nil {
				t.Fatalf("nodelet accepted a bad config; output:\n%s", out)
			}
			if !strings.Contains(string(out), tt.wantInError) {
				t.Errorf("error does not name %q:\n%s", tt.wantInError, out)
			}
		})
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfailCgroupV1: false\nfailSwapOn: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--hostname-override=Bad_Name", "--config="+good, "--root-dir="+filepath.Join(dir, "root")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Bad_Name") && !strings.Contains(string(out), "bad_name") {
		t.Errorf("an invalid node name must be refused with its name in the error; got %v:\n%s", err, out)
	}
}
