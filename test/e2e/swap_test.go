//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestSwap (issue 32, item 5): the upstream kubelet v1.37.2 runs a mixed set of pods (probes of
// each kind but gRPC, init + sidecar, every local volume kind, a CSI claim and an inline CSI
// volume, a static pod with its mirror, a Guaranteed pod pinned by the static CPU manager, a
// pod holding a device of upstream's sample device plugin); it is stopped and nodelet started
// with the same config, kubeconfig, root dir and flags; then back to the kubelet. After each
// swap: no container restarted or replaced and no sandbox added or removed (API and CRI), every
// pod Ready, the mirror pod's UID kept, the pinned pod's CPUs and the device assignment
// unchanged, no checkpoint set aside as corrupt, a configMap change reaches the volumes, a
// deleted pod is cleaned up completely (containers, sandbox, pod dir, log dir) and a new pod
// starts, Ready, with the free device. It prints how long the node was NotReady.
//
// On main before issue 32's identity and checkpoint work (edc4422) it failed: nodelet refused
// the kubelet's cpu_manager_state as corrupt and did not start; without the static policy it
// started but killed the static pod and ran it again under a new UID (new sandbox, new mirror
// pod), set the kubelet's cpu_manager_state, memory_manager_state and
// kubelet_internal_checkpoint aside as corrupt (the device pod's device gone from the pod
// resources API), and the kubelet, back, refused nodelet's cpu_manager_state and did not start.
func TestSwap(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	kubelet := f.KubeletBin()
	nodelet := os.Getenv("NODELET_BIN")
	if nodelet == "" {
		t.Fatal("NODELET_BIN is not set")
	}
	s := &swapTest{f: f, t: t, ns: f.NewNamespace(), hostDir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(s.hostDir, "marker"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.objects(ctx)

	start := time.Now()
	s.n = startNode(t, f, framework.NodeletOptions{
		Bin:        kubelet,
		StaticPods: []*v1.Pod{s.staticPod()},
		Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
			c.CPUManagerPolicy = "static"
			c.ReservedSystemCPUs = "0"
			c.CPUManagerReconcilePeriod = metav1.Duration{Duration: time.Second}
			// Both agents update configMap volumes at a pod's periodic sync; a short period
			// keeps the configMap rounds below short.
			c.SyncFrequency = metav1.Duration{Duration: 5 * time.Second}
		},
	})
	if !s.n.Upstream {
		t.Fatalf("%s is not the upstream kubelet (its --version names nodelet)", kubelet)
	}
	s.dp = f.StartSampleDevicePlugin(s.n)
	nodeDevices(ctx, t, f, framework.SampleDeviceResource, 2, 2)
	f.StartCSIDriver(s.n)
	s.createPods(ctx)
	s.waitAllReady(ctx, 3*time.Minute)
	t.Logf("the kubelet runs %d pods, all Ready %.1fs after its start", len(s.steady)+1, time.Since(start).Seconds())
	s.pinnedCPUs, s.devices = s.cpusOf(ctx, "pinned", "main"), s.devicesOf(ctx, "device")
	if s.pinnedCPUs != "1" {
		t.Errorf("pinned runs on CPUs %q under the kubelet, want 1 (reservedSystemCPUs 0)", s.pinnedCPUs)
	}
	if len(s.devices) != 1 {
		t.Fatalf("device holds %v under the kubelet, want one device", s.devices)
	}
	s.mirrorUID = s.mirror(ctx).UID

	s.watchNode(ctx)
	r1 := s.swap(ctx, "kubelet->nodelet", nodelet, 1)
	s.deleteAndCreate(ctx, "doomed", "new-1", 1)
	r2 := s.swap(ctx, "nodelet->kubelet", kubelet, 2)
	s.deleteAndCreate(ctx, "new-1", "new-2", 2)
	for _, r := range []string{r1, r2} {
		t.Log(r)
	}
	t.Logf("TestSwap wall time %.1fs", time.Since(start).Seconds())
}

type swapTest struct {
	f       *framework.Framework
	t       *testing.T
	ns      string
	hostDir string
	n       *framework.Nodelet
	dp      *framework.SampleDevicePlugin

	// steady are the API pods that live through both swaps (the mirror pod aside).
	steady     []string
	pinnedCPUs string
	devices    []string
	mirrorUID  types.UID
	cmRound    int

	mu      sync.Mutex
	samples []nodeSample
}

type nodeSample struct {
	at    time.Time
	ready bool
}

const swapCM, swapSecret, swapClaim = "swap-cm", "swap-secret", "swap-data"

// objects creates the configMap, the secret and the CSI claim the pods mount.
func (s *swapTest) objects(ctx context.Context) {
	c := s.f.Client.CoreV1()
	if _, err := c.ConfigMaps(s.ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: swapCM}, Data: map[string]string{"v": "round-0"}}, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating configMap: %v", err)
	}
	if _, err := c.Secrets(s.ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: swapSecret}, StringData: map[string]string{"password": "s3cret"}}, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("creating secret: %v", err)
	}
	csiClaim(ctx, s.t, s.f, s.ns, swapClaim)
}

// pod is a busybox pod whose container "main" runs script (stopping at once on TERM) and which
// mounts the configMap at /sync: each API pod has it, so that the configMap rounds of swap see
// the new agent sync every pod.
func (s *swapTest) pod(name, script string) *v1.Pod {
	p := s.f.BusyboxPod(s.ns, name, "sh", "-c", "trap 'exit 0' TERM; "+script+"; while true; do sleep 1; done")
	p.Spec.NodeName = s.f.Env.NodeName
	p.Labels = map[string]string{"swap": name}
	p.Spec.Volumes = []v1.Volume{{Name: "sync", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: swapCM}}}}}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "sync", MountPath: "/sync"}}
	return p
}

func (s *swapTest) staticPod() *v1.Pod {
	p := s.f.BusyboxPod(s.ns, "static", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done")
	p.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}
	return p
}

func execProbe(cmd ...string) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}, PeriodSeconds: 1, FailureThreshold: 5}
}

func httpProbe(port int) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(port))}}, PeriodSeconds: 1, FailureThreshold: 5}
}

func tcpProbe(port int) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}, PeriodSeconds: 1, FailureThreshold: 5}
}

// devicePod asks for one of the sample plugin's devices.
func (s *swapTest) devicePod(name string) *v1.Pod {
	p := s.pod(name, "true")
	p.Spec.Containers[0].Resources.Limits = v1.ResourceList{framework.SampleDeviceResource: resource.MustParse("1")}
	return p
}

// createPods creates the kubelet's pods, all at once.
func (s *swapTest) createPods(ctx context.Context) {
	var pods []*v1.Pod

	// Probes: HTTP, TCP and exec, as startup, readiness and liveness probes.
	probes := s.pod("probes", "true")
	probes.Spec.Containers[0].StartupProbe = execProbe("true")
	probes.Spec.Containers[0].ReadinessProbe = execProbe("test", "-e", "/sync/v")
	probes.Spec.Containers[0].LivenessProbe = execProbe("true")
	probes.Spec.Containers = append(probes.Spec.Containers, v1.Container{
		Name: "web", Image: s.f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
		Command:        []string{"sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"},
		StartupProbe:   httpProbe(8080),
		ReadinessProbe: tcpProbe(8080),
		LivenessProbe:  httpProbe(8080),
	})
	pods = append(pods, probes)

	// An init container and a sidecar (restartable init container) with probes.
	side := s.pod("init-sidecar", "test -e /work/init-done")
	side.Spec.Volumes = append(side.Spec.Volumes, v1.Volume{Name: "work", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	work := v1.VolumeMount{Name: "work", MountPath: "/work"}
	side.Spec.Containers[0].VolumeMounts = append(side.Spec.Containers[0].VolumeMounts, work)
	side.Spec.InitContainers = []v1.Container{{
		Name: "init", Image: s.f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
		Command: []string{"sh", "-c", "echo done > /work/init-done"}, VolumeMounts: []v1.VolumeMount{work},
	}, {
		Name: "sidecar", Image: s.f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
		Command:        []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
		RestartPolicy:  ptr.To(v1.ContainerRestartPolicyAlways),
		VolumeMounts:   []v1.VolumeMount{work},
		StartupProbe:   execProbe("test", "-e", "/work/init-done"),
		ReadinessProbe: execProbe("true"),
	}}
	pods = append(pods, side)

	// Every local volume kind; Ready only while the container sees each.
	vols := s.pod("volumes", "true")
	vols.Spec.Volumes = append(vols.Spec.Volumes,
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
		v1.Volume{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: swapSecret}}},
		v1.Volume{Name: "proj", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: swapCM}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: swapSecret}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}},
		}}}},
		v1.Volume{Name: "dapi", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: s.hostDir}}},
	)
	for _, m := range []string{"scratch", "mem", "sec", "proj", "dapi", "host"} {
		vols.Spec.Containers[0].VolumeMounts = append(vols.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: m, MountPath: "/" + m})
	}
	vols.Spec.Containers[0].ReadinessProbe = execProbe("sh", "-c",
		"test -d /scratch && test -d /mem && test -s /sec/password && test -s /proj/v && test -s /proj/password && test -s /proj/name && test -s /proj/token && grep -q swap /dapi/labels && test -s /host/marker")
	pods = append(pods, vols)

	// The static CPU manager's Guaranteed pod, and a pod holding a device.
	pinned := s.pod("pinned", "true")
	r := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("32Mi")}
	pinned.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: r, Limits: r}
	pods = append(pods, pinned, s.devicePod("device"), s.pod("doomed", "true"))

	for _, p := range pods {
		s.f.CreatePod(ctx, p)
		s.steady = append(s.steady, p.Name)
	}
	// A CSI claim (staged and published) and an inline CSI volume: through the scheduler, as
	// the claim binds WaitForFirstConsumer.
	csi := s.pod("csi", "echo swap > /data/f")
	csi.Spec.NodeName = ""
	csi.Spec.Volumes = append(csi.Spec.Volumes, pvcVolume(swapClaim),
		v1.Volume{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: framework.CSIDriverName}}})
	csi.Spec.Containers[0].VolumeMounts = append(csi.Spec.Containers[0].VolumeMounts,
		v1.VolumeMount{Name: "data", MountPath: "/data"}, v1.VolumeMount{Name: "inline", MountPath: "/inline"})
	csi.Spec.Containers[0].ReadinessProbe = execProbe("sh", "-c", "test -s /data/f && test -d /inline")
	scheduledPod(ctx, s.t, s.f, csi)
	s.steady = append(s.steady, csi.Name)
	// doomed is deleted after the first swap.
	s.steady = slices.DeleteFunc(s.steady, func(n string) bool { return n == "doomed" })
}

func (s *swapTest) mirrorName() string { return "static-" + s.f.Env.NodeName }

func (s *swapTest) mirror(ctx context.Context) *v1.Pod {
	s.t.Helper()
	p := s.f.WaitForPod(ctx, s.ns, s.mirrorName(), time.Minute, "to exist", func(*v1.Pod) bool { return true })
	if p.Annotations["kubernetes.io/config.mirror"] == "" {
		s.t.Errorf("%s has no kubernetes.io/config.mirror annotation: not a mirror pod", p.Name)
	}
	return p
}

// waitAllReady waits until the steady pods, doomed (while it lives) and the mirror pod are
// Ready.
func (s *swapTest) waitAllReady(ctx context.Context, timeout time.Duration) {
	s.t.Helper()
	var notReady []string
	err := framework.WaitFor(ctx, timeout, "every pod Ready", func(ctx context.Context) (bool, error) {
		pods, err := s.f.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := map[string]bool{}
		for i := range pods.Items {
			ready[pods.Items[i].Name] = framework.IsPodReady(&pods.Items[i])
		}
		notReady = nil
		for _, name := range append([]string{s.mirrorName()}, s.steady...) {
			if !ready[name] {
				notReady = append(notReady, name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		s.describe(ctx)
		s.t.Fatalf("%v: not Ready: %v", err, notReady)
	}
}

func (s *swapTest) describe(ctx context.Context) {
	pods, err := s.f.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Logf("listing pods: %v", err)
		return
	}
	for i := range pods.Items {
		s.t.Logf("%s", framework.DescribePod(&pods.Items[i]))
	}
}

// podState is what must not change across a swap: the API's container IDs and restart counts
// and the runtime's sandboxes and containers of the test's namespace.
type podState struct {
	uids       map[string]string // pod name -> UID
	containers map[string]string // pod/container -> container ID
	restarts   map[string]int32  // pod/container -> restartCount
	sandboxes  map[string]string // CRI sandbox ID -> pod name and state
	criCtrs    map[string]string // CRI container ID -> pod/container and attempt
}

func (s *swapTest) state(ctx context.Context) podState {
	s.t.Helper()
	st := podState{uids: map[string]string{}, containers: map[string]string{}, restarts: map[string]int32{},
		sandboxes: map[string]string{}, criCtrs: map[string]string{}}
	pods, err := s.f.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatalf("listing pods: %v", err)
	}
	for _, p := range pods.Items {
		st.uids[p.Name] = string(p.UID)
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			st.containers[p.Name+"/"+cs.Name] = cs.ContainerID
			st.restarts[p.Name+"/"+cs.Name] = cs.RestartCount
		}
	}
	sel := map[string]string{"io.kubernetes.pod.namespace": s.ns}
	sbs, err := s.f.CRI.PodSandboxes(ctx, sel)
	if err != nil {
		s.t.Fatalf("listing sandboxes: %v", err)
	}
	for _, sb := range sbs {
		st.sandboxes[sb.Id] = sb.Metadata.Name + " " + sb.State.String()
	}
	ctrs, err := s.f.CRI.Containers(ctx, sel)
	if err != nil {
		s.t.Fatalf("listing containers: %v", err)
	}
	for _, c := range ctrs {
		st.criCtrs[c.Id] = fmt.Sprintf("%s/%s#%d", c.Labels["io.kubernetes.pod.name"], c.Metadata.Name, c.Metadata.Attempt)
	}
	return st
}

// diff is what is in a and not in b (keys, or keys whose values differ), sorted.
func diff(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			out = append(out, k+" ("+v+")")
		} else if w != v {
			out = append(out, k+": "+v+" -> "+w)
		}
	}
	sort.Strings(out)
	return out
}

// watchNode samples the Node's Ready condition every 100ms until the test ends.
func (s *swapTest) watchNode(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if n, err := s.f.Client.CoreV1().Nodes().Get(ctx, s.f.Env.NodeName, metav1.GetOptions{}); err == nil {
				ready := false
				for _, c := range n.Status.Conditions {
					if c.Type == v1.NodeReady {
						ready = c.Status == v1.ConditionTrue
					}
				}
				s.mu.Lock()
				s.samples = append(s.samples, nodeSample{at: time.Now(), ready: ready})
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// notReady is how long the Node's Ready condition was not True between from and to (as
// sampled).
func (s *swapTest) notReady(from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var total time.Duration
	for i, smp := range s.samples {
		if smp.ready || smp.at.Before(from) || smp.at.After(to) {
			continue
		}
		next := to
		if i+1 < len(s.samples) && s.samples[i+1].at.Before(to) {
			next = s.samples[i+1].at
		}
		total += next.Sub(smp.at)
	}
	return total
}

// syncRound changes the configMap and waits until every steady pod's volume shows the new
// value: proof that the running agent has synced each pod since the change (agents update
// configMap volumes in a pod's sync).
func (s *swapTest) syncRound(ctx context.Context, timeout time.Duration) {
	s.t.Helper()
	s.cmRound++
	val := fmt.Sprintf("round-%d", s.cmRound)
	cm, err := s.f.Client.CoreV1().ConfigMaps(s.ns).Get(ctx, swapCM, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	cm.Data["v"] = val
	if _, err := s.f.Client.CoreV1().ConfigMaps(s.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		s.t.Fatalf("updating configMap: %v", err)
	}
	uids := s.state(ctx).uids
	var stale []string
	err = framework.WaitFor(ctx, timeout, "configMap "+val+" in every pod's volume", func(context.Context) (bool, error) {
		stale = nil
		for _, name := range s.steady {
			path := filepath.Join(s.n.RootDir, "pods", uids[name], "volumes", "kubernetes.io~configmap", "sync", "v")
			if b, err := os.ReadFile(path); err != nil || string(b) != val {
				stale = append(stale, fmt.Sprintf("%s=%q", name, b))
			}
		}
		return len(stale) == 0, nil
	})
	if err != nil {
		s.t.Errorf("%v: stale %v", err, stale)
	}
}

// cpusOf is the CPUs the container's first process may run on (/proc/<pid>/status).
func (s *swapTest) cpusOf(ctx context.Context, pod, ctr string) string {
	s.t.Helper()
	cs, err := s.f.CRI.Containers(ctx, map[string]string{"io.kubernetes.pod.namespace": s.ns, "io.kubernetes.pod.name": pod, "io.kubernetes.container.name": ctr})
	if err != nil || len(cs) != 1 {
		s.t.Fatalf("container %s/%s in the runtime: %d (%v), want one", pod, ctr, len(cs), err)
	}
	pid, err := s.f.CRI.ContainerPid(ctx, cs[0].Id)
	if err != nil {
		s.t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	s.t.Fatalf("no Cpus_allowed_list in /proc/%d/status", pid)
	return ""
}

// devicesOf is the pod's sample devices in the running agent's pod resources API, and checks
// that its container has exactly those mounted (the plugin's Allocate gives a bind mount of
// /tmp/<ID>).
func (s *swapTest) devicesOf(ctx context.Context, pod string) []string {
	s.t.Helper()
	ids := sampleDevicesOf(ctx, s.t, podResourcesClient(s.t, s.n), s.ns, pod)
	cs, err := s.f.CRI.Containers(ctx, map[string]string{"io.kubernetes.pod.namespace": s.ns, "io.kubernetes.pod.name": pod, "io.kubernetes.container.name": "main"})
	if err != nil || len(cs) != 1 {
		s.t.Fatalf("container %s/main in the runtime: %d (%v), want one", pod, len(cs), err)
	}
	pid, err := s.f.CRI.ContainerPid(ctx, cs[0].Id)
	if err != nil {
		s.t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		s.t.Fatal(err)
	}
	var mounted []string
	for _, l := range strings.Split(string(b), "\n") {
		if fs := strings.Fields(l); len(fs) > 4 && strings.HasPrefix(fs[4], "/tmp/Dev-") {
			mounted = append(mounted, strings.TrimPrefix(fs[4], "/tmp/"))
		}
	}
	slices.Sort(mounted)
	if !slices.Equal(ids, mounted) {
		s.t.Errorf("%s: the pod resources API lists devices %v, the container has %v mounted", pod, ids, mounted)
	}
	return mounted
}

// swap replaces the running agent with bin and checks that nothing of the pods changed.
func (s *swapTest) swap(ctx context.Context, name, bin string, round int) string {
	t := s.t
	t.Helper()
	before := s.state(ctx)
	start := time.Now()
	if err := s.n.Stop(); err != nil {
		t.Logf("%s: the old agent exited with %v", name, err)
	}
	stopped := time.Since(start)
	s.n.SwapBinary(bin)
	s.f.WaitForNodeReady(ctx, 2*time.Minute)
	nodeReady := time.Since(start)
	// Two configMap rounds: the second shows that each pod's first sync under the new agent,
	// restarts included, is over.
	s.syncRound(ctx, time.Minute)
	s.syncRound(ctx, time.Minute)
	synced := time.Since(start)
	s.waitAllReady(ctx, time.Minute)
	ready := time.Since(start)
	after := s.state(ctx)
	notReady := s.notReady(start, time.Now())

	// Every pod of the namespace counts: the steady ones, the mirror pod, and the pod the
	// round after will delete.
	var restarts int32
	for k, n := range after.restarts {
		if m, ok := before.restarts[k]; ok && n != m {
			restarts += n - m
			t.Errorf("%s: %s restarted: restartCount %d -> %d", name, k, m, n)
		}
	}
	if d := append(diff(before.containers, after.containers), diff(after.containers, before.containers)...); len(d) > 0 {
		t.Errorf("%s: containers in the API changed: %v", name, d)
	}
	removedSB, addedSB := diff(before.sandboxes, after.sandboxes), diff(after.sandboxes, before.sandboxes)
	if len(removedSB)+len(addedSB) > 0 {
		t.Errorf("%s: sandboxes removed or changed %v, added %v", name, removedSB, addedSB)
	}
	removedC, addedC := diff(before.criCtrs, after.criCtrs), diff(after.criCtrs, before.criCtrs)
	if len(removedC)+len(addedC) > 0 {
		t.Errorf("%s: runtime containers removed %v, added %v", name, removedC, addedC)
	}
	line := fmt.Sprintf("SWAP %d %s: restarts=%d containers added=%d removed=%d sandboxes added=%d removed=%d NotReady=%.1fs (old agent stopped in %.1fs, node Ready %.1fs, every pod synced %.1fs, Ready %.1fs after the stop)",
		round, name, restarts, len(addedC), len(removedC), len(addedSB), len(removedSB), notReady.Seconds(),
		stopped.Seconds(), nodeReady.Seconds(), synced.Seconds(), ready.Seconds())
	t.Log(line)
	if d := diff(before.uids, after.uids); len(d) > 0 {
		t.Errorf("%s: pod UIDs changed (mirror pod recreated?): %v", name, d)
	}
	if m := s.mirror(ctx); m.UID != s.mirrorUID {
		t.Errorf("%s: the mirror pod's UID changed %s -> %s", name, s.mirrorUID, m.UID)
	}
	if got := s.cpusOf(ctx, "pinned", "main"); got != s.pinnedCPUs {
		t.Errorf("%s: pinned's CPUs changed %q -> %q", name, s.pinnedCPUs, got)
	}
	s.waitPluginRegistered(ctx)
	if got := s.devicesOf(ctx, "device"); !slices.Equal(got, s.devices) {
		t.Errorf("%s: device's devices changed %v -> %v", name, s.devices, got)
	}
	corrupt, _ := filepath.Glob(filepath.Join(s.n.RootDir, "*.corrupt-*"))
	more, _ := filepath.Glob(filepath.Join(s.n.RootDir, "*", "*.corrupt-*"))
	if corrupt = append(corrupt, more...); len(corrupt) > 0 {
		t.Errorf("%s: checkpoints set aside as corrupt: %v", name, corrupt)
	}
	return line
}

// waitPluginRegistered waits until the sample device plugin has registered with the running
// agent: its pod resources API lists both devices as allocatable. (The Node's status may
// still show the old agent's figures; a pod asking for a device before the registration is
// refused, as upstream's device manager does with a checkpoint naming the resource.)
func (s *swapTest) waitPluginRegistered(ctx context.Context) {
	s.t.Helper()
	pr := podResourcesClient(s.t, s.n)
	var ids []string
	err := framework.WaitFor(ctx, time.Minute, "the sample device plugin registered with the running agent", func(ctx context.Context) (bool, error) {
		var err error
		ids, err = allocatableSampleDevices(ctx, pr)
		return len(ids) == len(framework.SampleDevices()), err
	})
	if err != nil {
		s.t.Fatalf("%v: allocatable %v; %s", err, ids, s.goroutineDump(ctx))
	}
}

// goroutineDump writes the running agent's goroutines (its /debug/pprof, through the API
// server's node proxy) beside its log, for a failure that looks like a hang; it says where.
func (s *swapTest) goroutineDump(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	b, err := s.f.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", s.f.Env.NodeName, "proxy/debug/pprof/goroutine").
		Param("debug", "2").DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("no goroutine dump: %v", err)
	}
	path := filepath.Join(s.n.Dir, fmt.Sprintf("goroutines-%d.txt", time.Now().Unix()))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Sprintf("no goroutine dump: %v", err)
	}
	return "the agent's goroutines: " + path
}

// deleteAndCreate deletes pod gone and waits until nothing of it is left on the node, then
// creates pod fresh (holding the free sample device) and waits until it is Ready.
func (s *swapTest) deleteAndCreate(ctx context.Context, gone, fresh string, round int) {
	t := s.t
	t.Helper()
	old := s.f.WaitForPod(ctx, s.ns, gone, time.Second, "to exist", func(*v1.Pod) bool { return true })
	s.f.DeletePod(ctx, s.ns, gone, nil)

	uid := string(old.UID)
	podDir := filepath.Join(s.n.RootDir, "pods", uid)
	logDir := filepath.Join(s.n.PodLogsDir, fmt.Sprintf("%s_%s_%s", s.ns, gone, uid))
	if err := podGoneFromNode(ctx, s.f, s.ns, gone, uid, time.Minute); err != nil {
		t.Errorf("round %d: %v", round, err)
	}
	err := framework.WaitFor(ctx, 30*time.Second, gone+"'s pod dir and log dir removed", func(context.Context) (bool, error) {
		_, e1 := os.Stat(podDir)
		_, e2 := os.Stat(logDir)
		return os.IsNotExist(e1) && os.IsNotExist(e2), nil
	})
	if err != nil {
		left, _ := filepath.Glob(filepath.Join(podDir, "*", "*"))
		t.Errorf("round %d: %v (left: %v)", round, err, left)
	}
	// Only now: a device of a pod still terminating is not free (either agent refuses the pod).
	p := s.devicePod(fresh)
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	s.f.CreatePod(ctx, p)
	s.f.WaitForPodReady(ctx, s.ns, fresh, time.Minute)
	devs := s.devicesOf(ctx, fresh)
	if len(devs) != 1 || slices.Contains(s.devices, devs[0]) {
		t.Errorf("round %d: %s holds devices %v, want the one device pod does not hold (%v)", round, fresh, devs, s.devices)
	}
	s.steady = append(slices.DeleteFunc(s.steady, func(n string) bool { return n == gone }), fresh)
}
