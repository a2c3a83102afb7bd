package podruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/credentialprovider"
	"github.com/nodelet/nodelet/envvars"
	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podstatus"
	"github.com/nodelet/nodelet/pullrecords"
	"github.com/nodelet/nodelet/volumes"
)

// Runtime is the part of the CRI runtime service podruntime uses.
type Runtime interface {
	RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error)
	StopPodSandbox(ctx context.Context, podSandboxID string) error
	RemovePodSandbox(ctx context.Context, podSandboxID string) error
	PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error)
	CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
	StartContainer(ctx context.Context, containerID string) error
	StopContainer(ctx context.Context, containerID string, timeout int64) error
	RemoveContainer(ctx context.Context, containerID string) error
	// In-place resize: container and sandbox resources, and a container's memory use.
	UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error
	UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error)
	ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error)
}

// Images is the part of the CRI image service podruntime uses.
type Images interface {
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
	PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error)
}

// Volumes prepares a pod's volumes on the host.
type Volumes interface {
	SetUpPod(ctx context.Context, pod *v1.Pod) (map[string]volumes.HostVolume, error)
	// PrepareSubPath bind-mounts a volumeMount's sub path, resolved inside
	// the volume, and returns the path to give the runtime.
	PrepareSubPath(ctx context.Context, pod *v1.Pod, hv volumes.HostVolume, sp volumes.SubPath) (string, error)
	// TearDownSubPaths unmounts and removes the pod's sub path mounts.
	TearDownSubPaths(ctx context.Context, podUID types.UID) error
}

// NodeFacts describes the node a pod runs on, as env vars and limits need it.
type NodeFacts struct {
	Name        string
	HostIPs     []string
	Allocatable v1.ResourceList
	// MemoryCapacity is the node's memory in bytes (for OOM score adjustment).
	MemoryCapacity int64
	// NetworkError is why the runtime says its network is not ready ("container runtime
	// network not ready: NetworkReady=false ..."), "" when it is. Only host-network pods
	// are synced while it is set, as upstream.
	NetworkError string
}

// networkNotReadyMsg is upstream's NetworkNotReadyErrorMsg.
const networkNotReadyMsg = "network is not ready"

// Config holds the node-wide settings podruntime applies to every pod: plain
// values, resolved by the caller. The collaborators are in Deps.
type Config struct {
	RootDir       string
	PodLogsDir    string
	ClusterDNS    []string
	ClusterDomain string
	ResolvConf    string
	// MaxParallelImagePulls bounds concurrent pulls; 1 means serialized pulls.
	MaxParallelImagePulls int
	// MaxRuntimeStarts bounds how many RunPodSandbox calls and container
	// creations (CreateContainer through StartContainer) run at once; 0 means no
	// bound. A runtime given a whole burst at once starts it no sooner and
	// finishes every pod late; in turns, pods come up in the order they came
	// (container creations go first, see startSlots).
	MaxRuntimeStarts int
	// RegistryPullQPS and RegistryBurst are registryPullQPS/registryBurst: a token
	// bucket over image pulls; a pull finding it empty fails with "pull QPS exceeded"
	// (and backs off), as upstream. 0 QPS means no limit.
	RegistryPullQPS float64
	RegistryBurst   int
	// CrashLoopBackOffMax caps the restart back-off (default 5m).
	CrashLoopBackOffMax time.Duration
	// Resources says how container limits, OOM scores and swap are computed.
	Resources cgroups.ResourceOptions
	// SeccompDefault is KubeletConfiguration seccompDefault: containers whose
	// pod and container ask for no seccomp profile get RuntimeDefault.
	SeccompDefault bool
	// ImageVolumeSupport is nil when the runtime mounts image volumes, else
	// why it does not (ImageVolumeSupport); pods' image volumes then fail.
	ImageVolumeSupport error
}

// Deps are the manager's collaborators: the first seven it needs, the others
// are optional (nil turns their feature off, as each says).
type Deps struct {
	Runtime Runtime
	Images  Images
	Volumes Volumes
	Env     envvars.Sources
	// Node describes the node now (its IPs, allocatable, network readiness).
	Node func() NodeFacts
	// Recorder may be a record.FakeRecorder or one that drops events.
	Recorder record.EventRecorder
	Clock    clock.Clock
	// CgroupParent returns the sandbox's cgroup parent; nil leaves it to the runtime.
	CgroupParent func(pod *v1.Pod) string
	// PodCgroups, when set, creates each pod's cgroup before its sandbox.
	PodCgroups PodCgroups
	// Hooks, when set, runs postStart and preStop handlers.
	Hooks Hooks
	// Probes, when set, says which running containers failed liveness or startup,
	// and which sidecars have started.
	Probes ProbeResults
	// PullRecords, when set, records which credentials pulled which image and
	// decides whether a pod may use an image already present (KEP-2535).
	PullRecords PullRecords
	// CredentialProviders, when set, are the image credential provider
	// plugins asked for registry credentials after the pod's pull secrets.
	CredentialProviders CredentialProviders
	// RuntimeClasses, when set, resolves runtimeClassName to the runtime
	// handler; unset (no API server), every pod gets the default handler, as
	// upstream's kubelet without a client.
	RuntimeClasses RuntimeClasses
	// UserNamespaces gives pods their user namespace (hostUsers: false gets
	// a range of host IDs); unset, such pods are refused.
	UserNamespaces UserNamespaces
	// Actuated records what the runtime was told of container resources (in-place
	// resize); nil keeps it in memory.
	Actuated Actuated
	// PodResize, when set, resizes pod cgroups in place (with PodCgroups).
	PodResize PodCgroupResizer
	// CPUs, when set, gives each new container its cpuset (the CPU manager)
	// and is told when a pod is removed.
	CPUs CPUAffinity
	// Memory, when set, gives each new container its cpuset.mems (the
	// memory manager) and is told when a pod is removed.
	Memory MemoryAffinity
	// Devices, when set, adds the devices allocated to a container (device
	// plugins) to its config.
	Devices Devices
	// DynamicResources, when set, prepares a pod's ResourceClaims (the DRA
	// manager) before its sandbox is created.
	DynamicResources DynamicResources
}

// DynamicResources prepares the ResourceClaims of a pod (dra.Manager).
type DynamicResources interface {
	PrepareResources(ctx context.Context, pod *v1.Pod) error
}

// CPUAffinity is the CPU manager as container creation needs it.
type CPUAffinity interface {
	// CPUSetFor is the cpuset the container is created with; "" leaves it
	// to the runtime.
	CPUSetFor(podUID types.UID, container string) string
	// RemovePod releases a removed pod's exclusive CPUs.
	RemovePod(ctx context.Context, podUID types.UID)
}

// MemoryAffinity is the memory manager as container creation needs it.
type MemoryAffinity interface {
	// MemsFor is the cpuset.mems the container is created with; "" leaves
	// it to the runtime.
	MemsFor(podUID types.UID, container string) string
	// RemovePod releases a removed pod's NUMA memory.
	RemovePod(ctx context.Context, podUID types.UID)
}

// Devices puts a container's allocated devices (env, mounts, device nodes,
// annotations, CDI devices) into its CRI config (devicemanager.Manager).
type Devices interface {
	ApplyDevices(ctx context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error
}

// RuntimeClasses resolves a RuntimeClass name to its CRI runtime handler.
type RuntimeClasses interface {
	LookupRuntimeHandler(ctx context.Context, runtimeClassName *string) (string, error)
}

// UserNamespaces is the user namespace manager (userns.Manager).
type UserNamespaces interface {
	GetOrCreateUserNamespaceMappings(pod *v1.Pod, runtimeHandler string) (*runtimeapi.UserNamespace, error)
	Release(ctx context.Context, uid types.UID)
}

// PullRecords is the image pull credential verification (pullrecords.Manager).
type PullRecords interface {
	Verify(ctx context.Context, pullPolicy v1.PullPolicy, image, imageRef string, podSecrets func() []kubeletconfigv1beta1.ImagePullSecret) pullrecords.Decision
	RecordPullIntent(ctx context.Context, image string) error
	RecordImagePulled(ctx context.Context, image, imageRef string, creds *kubeletconfigv1beta1.ImagePullCredentials)
	RecordImagePullFailed(ctx context.Context, image string)
}

// CredentialProviders are the node's image credential provider plugins
// (credentialprovider.Providers).
type CredentialProviders interface {
	// Provide returns the credentials the plugins give for image, a
	// schemeless repository without tag or digest.
	Provide(ctx context.Context, image string) []credentialprovider.Credential
}

// PodCgroups creates pod-level cgroups (the QoS hierarchy's leaves).
type PodCgroups interface {
	EnsurePodCgroup(ctx context.Context, pod *v1.Pod) error
}

// cgroupParent returns the cgroup parent for pod, or "".
func (m *Manager) cgroupParent(pod *v1.Pod) string {
	if m.deps.CgroupParent == nil {
		return ""
	}
	return m.deps.CgroupParent(pod)
}

// Manager runs pods on a CRI runtime.
type Manager struct {
	cfg  Config
	deps Deps

	backoff      *flowcontrol.Backoff
	imageBackoff *flowcontrol.Backoff
	pullSlots    chan struct{}
	startSlots   *startSlots
	pullLimiter  flowcontrol.RateLimiter // nil: registryPullQPS 0, no limit
}

// New returns a Manager.
func New(cfg Config, deps Deps) *Manager {
	if cfg.CrashLoopBackOffMax == 0 {
		cfg.CrashLoopBackOffMax = 5 * time.Minute
	}
	if cfg.MaxParallelImagePulls < 1 {
		cfg.MaxParallelImagePulls = 1
	}
	initial := 10 * time.Second
	if initial > cfg.CrashLoopBackOffMax {
		initial = cfg.CrashLoopBackOffMax
	}
	if deps.Actuated == nil {
		deps.Actuated = allocation.NewMemoryState()
	}
	clk := deps.Clock
	return &Manager{
		cfg: cfg, deps: deps,
		backoff:      flowcontrol.NewFakeBackOff(initial, cfg.CrashLoopBackOffMax, clk),
		imageBackoff: flowcontrol.NewFakeBackOff(10*time.Second, 5*time.Minute, clk),
		pullSlots:    make(chan struct{}, cfg.MaxParallelImagePulls),
		startSlots:   newStartSlots(cfg.MaxRuntimeStarts),
		pullLimiter:  newPullLimiter(cfg.RegistryPullQPS, cfg.RegistryBurst, clk),
	}
}

// errPullQPSExceeded is upstream's words for a pull refused by registryPullQPS.
var errPullQPSExceeded = errors.New("pull QPS exceeded")

// newPullLimiter is the registryPullQPS/registryBurst token bucket; nil for 0 QPS
// (no limit, as upstream). A burst below 1 would refuse every pull, so it is 1.
func newPullLimiter(qps float64, burst int, clk clock.Clock) flowcontrol.RateLimiter {
	if qps <= 0 {
		return nil
	}
	return flowcontrol.NewTokenBucketRateLimiterWithClock(float32(qps), max(burst, 1), clk)
}

// Result tells the caller how the sync went.
type Result struct {
	// Waiting holds why containers are not running (back-off, image, config errors).
	Waiting map[string]podstatus.Waiting
	// RequeueAfter asks for another sync after a back-off ends, or soon
	// while a volume waits for its attachment; 0 means none.
	RequeueAfter time.Duration
	// InitFailed means the pod failed for good (init container under restartPolicy Never).
	InitFailed bool
	// Changed means the sync acted on the runtime (created, started or stopped something).
	Changed bool
	// Resized means the sync resized the pod in place (or tried to: ResizeErr
	// then says why it failed; the next sync tries again).
	Resized   bool
	ResizeErr error
	// ResizeDuration is how long the resize took.
	ResizeDuration time.Duration
}

// SyncPod drives the runtime one step toward pod's spec. It decides once
// (ComputeActions over the facts gathered first) and carries the plan out in
// named steps, each ending the sync early when what follows cannot happen.
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus) (Result, error) {
	if err := m.checkNetwork(pod); err != nil {
		return Result{}, err
	}
	s := m.plan(ctx, pod, st)
	m.reportBackOffs(s)
	if done, err := m.killForPlan(ctx, s); done || err != nil {
		return s.res, err
	}
	if err := m.setUpVolumes(ctx, s); err != nil {
		return s.res, err
	}
	m.resizeForPlan(ctx, s)
	if !s.acts.CreateSandbox && len(s.acts.StartInit) == 0 && len(s.acts.StartContainers) == 0 && len(s.acts.StartEphemeral) == 0 {
		return s.res, errors.Join(s.errs...)
	}
	if err := m.ensureSandbox(ctx, s); err != nil {
		return s.res, err
	}
	if err := m.writeHostsFile(pod, s.podIPs); err != nil {
		return s.res, err
	}
	m.startForPlan(ctx, s)
	return s.res, errors.Join(s.errs...)
}

// podSync is one SyncPod's state, handed from step to step.
type podSync struct {
	pod    *v1.Pod
	st     *pleg.PodStatus
	logger klog.Logger
	acts   Actions
	res    Result
	// errs are failures that do not end the sync (a resize, a container
	// that holds up no other); SyncPod returns them joined.
	errs []error
	// Set by setUpVolumes and ensureSandbox, for the containers' starts.
	vols      map[string]volumes.HostVolume
	sandboxID string
	sbCfg     *runtimeapi.PodSandboxConfig
	podIPs    []string
}

// checkNetwork holds a pod on the pod network until the runtime's network is
// ready, as upstream: its sandbox would have no network (or fail in CNI), and
// nothing else of it is acted on until then.
func (m *Manager) checkNetwork(pod *v1.Pod) error {
	if nerr := m.deps.Node().NetworkError; nerr != "" && !pod.Spec.HostNetwork {
		m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "NetworkNotReady", "%s: %s", networkNotReadyMsg, nerr)
		return fmt.Errorf("%s: %s", networkNotReadyMsg, nerr)
	}
	return nil
}

// plan gathers the facts and decides the sync (ComputeActions).
func (m *Manager) plan(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus) *podSync {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	m.initActuated(ctx, pod)
	acts := ComputeActions(gatherFacts(pod, st, m.deps.Clock.Now(), m.backoff, m.deps.Probes, m.actuatedFor(pod.UID)))
	logger.V(4).Info("Computed pod actions", "createSandbox", acts.CreateSandbox, "killPod", acts.KillPod,
		"startInit", acts.StartInit, "start", acts.StartContainers, "startEphemeral", acts.StartEphemeral, "kill", len(acts.KillContainers),
		"resizeMemory", len(acts.Resize.Memory), "resizeCPU", len(acts.Resize.CPU), "resizePod", acts.Resize.UpdatePod)
	return &podSync{
		pod: pod, st: st, logger: logger, acts: acts,
		res:       Result{Waiting: acts.Waiting, RequeueAfter: acts.RequeueAfter, InitFailed: acts.InitFailed},
		sandboxID: acts.SandboxID,
	}
}

// reportBackOffs gives a container held back by its crash-loop back-off
// upstream's BackOff warning on each sync that finds it so (the event
// recorder folds the repeats into a count).
func (m *Manager) reportBackOffs(s *podSync) {
	for _, name := range slices.Sorted(maps.Keys(s.acts.Waiting)) {
		if s.acts.Waiting[name].Reason == "CrashLoopBackOff" {
			m.deps.Recorder.Eventf(s.pod, v1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)", name, s.pod.Name, s.pod.Namespace, s.pod.UID)
		}
	}
}

// killForPlan stops the containers the plan kills, then the pod when it
// kills the pod; done means the sync ends there (the pod was only killed).
func (m *Manager) killForPlan(ctx context.Context, s *podSync) (done bool, err error) {
	pod, st, acts := s.pod, s.st, s.acts
	// Containers killed for a reason (probe failure, changed spec) go first, so
	// their Killing event says why even when the whole pod stops next.
	killed := map[string]bool{}
	for _, c := range st.Containers {
		reason, ok := acts.KillContainers[c.Id]
		if !ok {
			continue
		}
		s.res.Changed = true
		killed[c.Id] = true
		s.logger.Info("Stopping container", "containerID", c.Id, "reason", reason)
		var override *int64
		if g, ok := acts.KillGrace[c.Id]; ok {
			override = &g
		}
		if err := m.killContainer(ctx, pod, c, firstIP(m.podIPs(pod, st)), gracePeriod(pod, override), reason); err != nil {
			return true, fmt.Errorf("stopping container %s (%s): %w", c.Id, reason, err)
		}
	}
	if !acts.KillPod {
		return false, nil
	}
	if acts.CreateSandbox && len(st.Sandboxes) > 0 {
		m.deps.Recorder.Eventf(pod, v1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
	}
	if err := m.killPod(ctx, pod, st, nil, killed); err != nil {
		return true, fmt.Errorf("killing pod before recreating its sandbox: %w", err)
	}
	s.res.Changed = true
	if !acts.CreateSandbox {
		return true, nil
	}
	m.purgeInitContainers(ctx, pod, st)
	return false, nil
}

// setUpVolumes sets the pod's volumes up. Every sync does, not only the one
// that starts containers: as upstream's volume manager remounts on each pod
// sync, this is what brings changed configMaps, secrets, labels and
// annotations into running pods (periodic resyncs and pod updates).
// Unchanged content is not rewritten.
func (m *Manager) setUpVolumes(ctx context.Context, s *podSync) error {
	pod := s.pod
	vols, err := m.deps.Volumes.SetUpPod(ctx, pod)
	s.vols = vols
	if err == nil {
		return nil
	}
	if !volumes.OnlyKeptContent(err) {
		// Claims that could not be processed get upstream's "Unable to
		// attach or mount volumes" message; each other volume its own
		// event, worded as upstream's operation executor words it
		// ("MountVolume.SetUp failed for volume ...").
		for _, e := range joined(err) {
			var uv *volumes.UnprocessedVolumesError
			if errors.As(e, &uv) {
				m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedMount", "Unable to attach or mount volumes: %v", uv)
				if len(uv.Unattached) > 0 {
					// The attach/detach controller usually attaches within
					// seconds: look again soon, as upstream's mount wait polls,
					// not after the error back-off.
					s.res.RequeueAfter = attachRecheck
				}
				continue
			}
			m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedMount", "%v", e)
		}
		return fmt.Errorf("setting up volumes: %w", err)
	}
	// A refresh failed, the earlier content stays: the pod goes on, as
	// upstream's does when a remount fails, and the next sync tries again.
	for _, e := range joined(err) {
		m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedMount", "%v", e)
	}
	s.logger.Error(err, "Refreshing volumes failed; their earlier content stays")
	return nil
}

// resizeForPlan resizes the pod in place before anything starts, as
// upstream: a container restarted for its resize starts in the resized pod
// cgroup. A failure does not end the sync; the next one tries again.
func (m *Manager) resizeForPlan(ctx context.Context, s *podSync) {
	if s.acts.CreateSandbox || !s.acts.Resize.Needed() {
		return
	}
	s.res.Resized = true
	start := m.deps.Clock.Now()
	err := m.resizePod(ctx, s.pod, s.acts.SandboxID, s.acts.Resize)
	s.res.ResizeDuration = m.deps.Clock.Since(start)
	if err != nil {
		s.logger.Error(err, "Resizing pod failed; the next sync tries again")
		s.res.ResizeErr = err
		s.errs = append(s.errs, fmt.Errorf("resizing pod: %w", err))
	}
}

// ensureSandbox builds the sandbox config the containers start with and, when
// the plan says so, creates the sandbox (its claims, log directory and pod
// cgroup first); it sets the pod's IPs.
func (m *Manager) ensureSandbox(ctx context.Context, s *podSync) error {
	pod, st, acts := s.pod, s.st, s.acts
	attempt := uint32(0)
	if len(st.Sandboxes) > 0 {
		attempt = st.Sandboxes[0].GetMetadata().GetAttempt()
	}
	if acts.CreateSandbox {
		attempt = acts.Attempt
	}
	if acts.CreateSandbox && m.deps.DynamicResources != nil {
		// As upstream: the claims are prepared before the sandbox, and a pod
		// whose claims cannot be prepared waits with this event.
		if err := m.deps.DynamicResources.PrepareResources(ctx, pod); err != nil {
			m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedPrepareDynamicResources", "Failed to prepare dynamic resources: %v", err)
			s.logger.Error(err, "Failed to prepare dynamic resources")
			return err
		}
	}
	handler, sbCfg, err := m.podSandboxConfig(ctx, pod, attempt)
	if err != nil {
		// As upstream: creating the sandbox fails with this event, and the pod
		// stays Pending and is synced again; starting containers in an
		// existing sandbox fails with the error alone.
		if acts.CreateSandbox {
			m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
			return fmt.Errorf("%s: %w", errCreatePodSandbox, err)
		}
		return fmt.Errorf("%s: %w", errConfigPodSandbox, err)
	}
	s.sbCfg = sbCfg
	s.podIPs = st.IPs
	if acts.CreateSandbox {
		if err := m.createSandbox(ctx, s, handler, attempt); err != nil {
			return err
		}
	}
	if pod.Spec.HostNetwork {
		s.podIPs = m.deps.Node().HostIPs
	}
	return nil
}

// createSandbox runs the pod's new sandbox from s.sbCfg and reads its IPs.
func (m *Manager) createSandbox(ctx context.Context, s *podSync, handler string, attempt uint32) error {
	pod := s.pod
	if err := os.MkdirAll(s.sbCfg.LogDirectory, 0o755); err != nil {
		return fmt.Errorf("creating pod log directory: %w", err)
	}
	if pc := m.deps.PodCgroups; pc != nil {
		if err := pc.EnsurePodCgroup(ctx, pod); err != nil {
			m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodContainer", "unable to ensure pod container exists: %v", err)
			return fmt.Errorf("creating pod cgroup: %w", err)
		}
	}
	if handler != "" {
		s.logger.V(2).Info("Running pod with runtime handler", "runtimeHandler", handler)
	}
	release, err := m.startSlots.acquire(ctx, false)
	if err != nil {
		return fmt.Errorf("waiting to create the pod sandbox: %w", err)
	}
	id, err := m.deps.Runtime.RunPodSandbox(ctx, s.sbCfg, handler)
	release()
	if err != nil {
		m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
		return fmt.Errorf("creating pod sandbox: %w", err)
	}
	s.sandboxID = id
	s.res.Changed = true
	s.logger.V(2).Info("Created pod sandbox", "sandboxID", id, "attempt", attempt)
	resp, err := m.deps.Runtime.PodSandboxStatus(ctx, id, false)
	if err != nil {
		return fmt.Errorf("reading status of new sandbox %s: %w", id, err)
	}
	s.podIPs = sandboxIPs(resp.GetStatus())
	return nil
}

// startForPlan starts the plan's containers: ephemeral ones first, as
// upstream (one that fails to start holds up no one, and an init container
// that fails does not keep the debugger out), then init containers in order
// (nothing after a regular one that failed), then app containers.
func (m *Manager) startForPlan(ctx context.Context, s *podSync) {
	pod, acts := s.pod, s.acts
	imageVolumeFailures := m.pullImageVolumes(ctx, pod, s.vols, s.sbCfg)
	start := func(c *v1.Container, targetID string) error {
		return m.startOne(ctx, s, c, targetID, imageVolumeFailures)
	}
	for _, i := range acts.StartEphemeral {
		ec := &pod.Spec.EphemeralContainers[i]
		c := v1.Container(ec.EphemeralContainerCommon)
		target, err := EphemeralTarget(ec, s.st)
		if err != nil {
			w, err := m.configFailed(pod, configErrorf(err, "starting ephemeral container %s", c.Name))
			s.res.Waiting[c.Name] = *w
			s.errs = append(s.errs, err)
			continue
		}
		if err := start(&c, target); err != nil {
			s.errs = append(s.errs, err)
		}
	}
	for _, i := range acts.StartInit {
		c := &pod.Spec.InitContainers[i]
		if err := start(c, ""); err != nil {
			s.errs = append(s.errs, err)
			if !podutil.IsRestartableInitContainer(c) {
				// Nothing after an init container may start before it succeeded.
				return
			}
			// A sidecar that failed to start holds up no one.
		}
	}
	for _, i := range acts.StartContainers {
		if err := start(&pod.Spec.Containers[i], ""); err != nil {
			s.errs = append(s.errs, err)
		}
	}
}

// startOne starts container c and records in s.res what came of it: its
// waiting state, a requeue for its image's back-off or a busy leftover.
func (m *Manager) startOne(ctx context.Context, s *podSync, c *v1.Container, targetID string, imageVolumeFailures map[string]imageVolumeFailure) error {
	pod, res := s.pod, &s.res
	if f, blocked := imageVolumeBlocking(c, imageVolumeFailures); blocked {
		// As its own image would: the container waits with the pull's reason.
		res.Waiting[c.Name] = f.waiting
		if d := m.imageBackoff.Get(imageBackoffKey(pod, f.image)); d > 0 && (res.RequeueAfter == 0 || d < res.RequeueAfter) {
			res.RequeueAfter = d
		}
		return f.err
	}
	w, err := m.startContainer(ctx, pod, s.st, c, targetID, s.sandboxID, s.sbCfg, s.vols, s.podIPs)
	if errors.Is(err, errLeftoverBusy) {
		// Not a failure: the runtime is still starting the earlier instance.
		// No new one is made meanwhile; the pod is synced again shortly.
		if res.RequeueAfter == 0 || leftoverRetry < res.RequeueAfter {
			res.RequeueAfter = leftoverRetry
		}
		return nil
	}
	if w == nil && err == nil {
		res.Changed = true
	}
	if w != nil {
		res.Waiting[c.Name] = *w
		if w.Reason == "ImagePullBackOff" || w.Reason == "ErrImagePull" {
			if d := m.imageBackoff.Get(imageBackoffKey(pod, c.Image)); d > 0 && (res.RequeueAfter == 0 || d < res.RequeueAfter) {
				res.RequeueAfter = d
			}
		}
	}
	return err
}

// purgeInitContainers removes every init container of the pod before its new
// sandbox is created, as upstream: init containers then run again from the first,
// and no instance left from the old sandbox passes for a completed one.
// Failures are logged: at worst an init container reruns later than it could.
func (m *Manager) purgeInitContainers(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus) {
	inits := map[string]bool{}
	for i := range pod.Spec.InitContainers {
		inits[pod.Spec.InitContainers[i].Name] = true
	}
	for _, c := range st.Containers {
		if !inits[containerName(c)] {
			continue
		}
		if err := m.deps.Runtime.RemoveContainer(ctx, c.Id); err != nil && !isNotFound(err) {
			klog.FromContext(ctx).Error(err, "Removing init container before recreating the sandbox", "pod", klog.KObj(pod), "containerID", c.Id)
		}
	}
}

// joined splits an errors.Join error into its parts.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// attachRecheck is how soon a pod whose volume waits for its attachment is
// synced again.
const attachRecheck = time.Second

// errCreatePodSandbox and errConfigPodSandbox are upstream's sync errors for a
// sandbox that could not be created or configured.
const (
	errCreatePodSandbox = "CreatePodSandboxError"
	errConfigPodSandbox = "ConfigPodSandboxError"
)

// podSandboxConfig resolves the pod's RuntimeClass to its runtime handler and
// builds the sandbox config with the pod's user namespace, which depends on
// what that handler supports.
func (m *Manager) podSandboxConfig(ctx context.Context, pod *v1.Pod, attempt uint32) (string, *runtimeapi.PodSandboxConfig, error) {
	handler := ""
	if rc := m.deps.RuntimeClasses; rc != nil {
		h, err := rc.LookupRuntimeHandler(ctx, pod.Spec.RuntimeClassName)
		if err != nil {
			return "", nil, err
		}
		handler = h
	}
	sbCfg, err := m.SandboxConfig(pod, attempt)
	if err != nil {
		return "", nil, fmt.Errorf("failed to build pod sandbox config: %w", err)
	}
	userns, err := m.userNamespace(pod, handler)
	if err != nil {
		return "", nil, err
	}
	sbCfg.GetLinux().GetSecurityContext().GetNamespaceOptions().UsernsOptions = userns
	return handler, sbCfg, nil
}

// userNamespace is the pod's user namespace: the manager's, or the node's
// when there is no manager, which then refuses hostUsers: false rather than
// run the pod in the host user namespace.
func (m *Manager) userNamespace(pod *v1.Pod, handler string) (*runtimeapi.UserNamespace, error) {
	if m.deps.UserNamespaces != nil {
		return m.deps.UserNamespaces.GetOrCreateUserNamespaceMappings(pod, handler)
	}
	if pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers {
		return nil, errors.New("can't set `spec.hostUsers: false`: nodelet has no user namespace manager")
	}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}, nil
}

func sandboxIPs(s *runtimeapi.PodSandboxStatus) []string {
	var ips []string
	if ip := s.GetNetwork().GetIp(); ip != "" {
		ips = append(ips, ip)
	}
	for _, a := range s.GetNetwork().GetAdditionalIps() {
		if a.GetIp() != "" {
			ips = append(ips, a.GetIp())
		}
	}
	return ips
}

// gracePeriod returns the seconds a container gets between SIGTERM and SIGKILL.
func gracePeriod(pod *v1.Pod, override *int64) int64 {
	g := int64(30)
	switch {
	case override != nil:
		g = *override
	case pod.DeletionGracePeriodSeconds != nil:
		g = *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		g = *pod.Spec.TerminationGracePeriodSeconds
	}
	// The upstream kubelet never kills faster than minimumGracePeriod, so a container always gets a chance.
	if g < minimumGracePeriod {
		g = minimumGracePeriod
	}
	return g
}

// KillPod stops the pod's running containers and then its sandboxes: app (and
// init) containers first, in parallel, each running its preStop hook inside the
// grace period; then sidecars, one by one in reverse order, with what is left of
// the grace period. Containers and sandboxes stay for GC or RemovePod, so logs
// and exit codes survive.
func (m *Manager) KillPod(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus, graceOverride *int64) error {
	return m.killPod(ctx, pod, st, graceOverride, nil)
}

func (m *Manager) killPod(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus, graceOverride *int64, skip map[string]bool) error {
	grace := gracePeriod(pod, graceOverride)
	start := m.deps.Clock.Now()
	podIP := firstIP(m.podIPs(pod, st))
	sidecarOrder := map[string]int{}
	for i := range pod.Spec.InitContainers {
		if podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			sidecarOrder[pod.Spec.InitContainers[i].Name] = i
		}
	}
	var regular, sidecars []*runtimeapi.ContainerStatus
	for _, c := range st.Containers {
		if skip[c.Id] || (c.State != runtimeapi.ContainerState_CONTAINER_RUNNING && c.State != runtimeapi.ContainerState_CONTAINER_CREATED) {
			continue
		}
		if _, ok := sidecarOrder[containerName(c)]; ok {
			sidecars = append(sidecars, c)
		} else {
			regular = append(regular, c)
		}
	}
	sort.Slice(sidecars, func(i, j int) bool {
		return sidecarOrder[containerName(sidecars[i])] > sidecarOrder[containerName(sidecars[j])]
	})
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, c := range regular {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.killContainer(ctx, pod, c, podIP, grace, ""); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, c := range sidecars {
		left := grace - int64(m.deps.Clock.Since(start).Seconds())
		if left < minimumGracePeriod {
			left = minimumGracePeriod
		}
		if err := m.killContainer(ctx, pod, c, podIP, left, ""); err != nil {
			errs = append(errs, err)
		}
	}
	for _, sb := range st.Sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if err := m.deps.Runtime.StopPodSandbox(ctx, sb.Id); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("stopping sandbox %s: %w", sb.Id, err))
		}
	}
	return errors.Join(errs...)
}

// podIPs are the addresses hooks reach the pod at: the node's for host-network pods.
func (m *Manager) podIPs(pod *v1.Pod, st *pleg.PodStatus) []string {
	if pod.Spec.HostNetwork {
		return m.deps.Node().HostIPs
	}
	return st.IPs
}

func firstIP(ips []string) string {
	if len(ips) == 0 {
		return ""
	}
	return ips[0]
}

// RemovePod removes every container and sandbox of a pod that is gone for good,
// plus its log directory and pod directory (after volumes were torn down).
func (m *Manager) RemovePod(ctx context.Context, uid types.UID, st *pleg.PodStatus, logDir string) error {
	if m.deps.CPUs != nil {
		m.deps.CPUs.RemovePod(ctx, uid)
	}
	if m.deps.Memory != nil {
		m.deps.Memory.RemovePod(ctx, uid)
	}
	var errs []error
	for _, c := range st.Containers {
		if err := m.deps.Runtime.RemoveContainer(ctx, c.Id); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("removing container %s: %w", c.Id, err))
		}
	}
	for _, sb := range st.Sandboxes {
		if err := m.deps.Runtime.RemovePodSandbox(ctx, sb.Id); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("removing sandbox %s: %w", sb.Id, err))
		}
	}
	if m.deps.UserNamespaces != nil && len(errs) == 0 {
		// Nothing of the pod is left in the runtime, so its host IDs may go
		// to another pod. Its file is in the pod directory, which goes below.
		m.deps.UserNamespaces.Release(ctx, uid)
	}
	m.deps.Actuated.RemovePod(uid)
	if err := m.deps.Volumes.TearDownSubPaths(ctx, uid); err != nil {
		errs = append(errs, fmt.Errorf("removing volume sub paths: %w", err))
	}
	if logDir != "" {
		if kept, err := mountutil.RemoveAll(logDir); err != nil {
			errs = append(errs, fmt.Errorf("removing pod log directory: %w", err))
		} else if len(kept) > 0 {
			klog.FromContext(ctx).Info("Kept mount points in the log directory of a removed pod", "podUID", uid, "paths", kept)
		}
	}
	// Never through a mount: plugins/ may hold what a CSI driver or an
	// earlier kubelet mounted there.
	for _, sub := range []string{"containers", "etc-hosts", "plugins"} {
		if kept, _ := mountutil.RemoveAll(filepath.Join(m.PodDir(uid), sub)); len(kept) > 0 {
			klog.FromContext(ctx).Info("Kept mount points in the directory of a removed pod", "podUID", uid, "paths", kept)
		}
	}
	// The pod directory goes only once volumes were torn down (it is empty then).
	_ = os.Remove(filepath.Join(m.PodDir(uid), "volumes"))
	_ = os.Remove(m.PodDir(uid))
	return errors.Join(errs...)
}

// PodDir is <rootDir>/pods/<uid>.
func (m *Manager) PodDir(uid types.UID) string {
	return filepath.Join(m.cfg.RootDir, "pods", string(uid))
}

// GCBackoff drops back-off entries nobody touched for a long time.
func (m *Manager) GCBackoff() {
	m.backoff.GC()
	m.imageBackoff.GC()
}
