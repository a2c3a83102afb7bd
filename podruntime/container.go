package podruntime

import (
	"context"
	"errors"
	"fmt"
	"k8s.io/utils/ptr"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/cgroups"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/envvars"
	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/podlogs"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/logrotate"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/podstatus"
	"github.com/nodelet/nodelet/pullrecords"
	"github.com/nodelet/nodelet/volumes"
)

func isNotFound(err error) bool { return cri.IsNotFound(err) }

// defaultMaskedPaths and defaultReadonlyPaths are the paths the runtime hides or
// makes read-only in unprivileged containers, as the upstream kubelet asks for them.
// Functions, not variables: each container config gets its own slice.
func defaultMaskedPaths() []string {
	return []string{
		"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
}

func defaultReadonlyPaths() []string {
	return []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
}

// startContainer pulls, creates and starts one container. A non-nil Waiting says
// why it could not start; the error is for the sync's caller. targetID, for an
// ephemeral container, is the container whose process namespace it joins.
func (m *Manager) startContainer(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus, c *v1.Container, targetID, sandboxID string,
	sbCfg *runtimeapi.PodSandboxConfig, vols map[string]volumes.HostVolume, podIPs []string) (*podstatus.Waiting, error) {
	imageRef, w, err := m.ensureImage(ctx, pod, c, sbCfg)
	if err != nil || w != nil {
		return w, err
	}
	cfg, next, err := m.prepareContainer(ctx, pod, st, c, imageRef, targetID, sbCfg, vols, podIPs)
	if err != nil {
		return m.configFailed(pod, err)
	}
	return m.runContainer(ctx, pod, c, cfg, next, sandboxID, sbCfg, podIPs)
}

// configError is a container that cannot be configured (its image's user, env,
// mounts, devices, security context, a missing target): it waits with
// CreateContainerConfigError and a Failed event, as upstream (configFailed).
type configError struct {
	doing string // what was being done, naming the container
	err   error
}

func (e *configError) Error() string { return e.doing + ": " + e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// configErrorf is a configError while doing what format says.
func configErrorf(err error, format string, args ...any) error {
	return &configError{doing: fmt.Sprintf(format, args...), err: err}
}

// configFailed turns a configError into the container's waiting state and
// its Failed event; any other error passes as is, with no waiting state.
func (m *Manager) configFailed(pod *v1.Pod, err error) (*podstatus.Waiting, error) {
	var ce *configError
	if !errors.As(err, &ce) {
		return nil, err
	}
	m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", ce.err)
	return &podstatus.Waiting{Reason: "CreateContainerConfigError", Message: ce.err.Error()}, err
}

// prepareContainer builds the CRI config of the container's next instance and
// records its resources as actuated. It fails with a configError, or with
// errLeftoverBusy while an earlier instance is still being started.
func (m *Manager) prepareContainer(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus, c *v1.Container, imageRef, targetID string,
	sbCfg *runtimeapi.PodSandboxConfig, vols map[string]volumes.HostVolume, podIPs []string) (*runtimeapi.ContainerConfig, instanceNumbers, error) {
	user, err := m.imageUserOf(ctx, c, imageRef)
	if err == nil {
		err = verifyRunAsNonRoot(pod, c, user.uid, user.username)
	}
	if err != nil {
		return nil, instanceNumbers{}, configErrorf(err, "verifying runAsNonRoot of container %s", c.Name)
	}
	next, err := m.nextInstanceOf(ctx, pod, st, c)
	if err != nil {
		return nil, next, err
	}
	node := m.deps.Node()
	envs, err := envvars.ForContainer(ctx, pod, c, m.deps.Env, envvars.PodInfo{
		PodIPs: podIPs, HostIPs: node.HostIPs, NodeName: node.Name, NodeAllocatable: node.Allocatable,
		MasterServiceNamespace: v1.NamespaceDefault,
	})
	if err != nil {
		return nil, next, configErrorf(err, "computing env of container %s", c.Name)
	}
	mounts, err := m.mounts(ctx, pod, c, vols, envs, next.Attempt)
	if err != nil {
		return nil, next, configErrorf(err, "computing mounts of container %s", c.Name)
	}
	devices, err := blockDevices(c, vols)
	if err != nil {
		return nil, next, configErrorf(err, "computing devices of container %s", c.Name)
	}
	linux, err := m.linuxContainerConfig(pod, c, sbCfg, targetID, user)
	if err != nil {
		return nil, next, configErrorf(err, "computing the security context of container %s", c.Name)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(next.Attempt)},
		Image:      &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image},
		Command:    envvars.ExpandCommand(c.Command, envs),
		Args:       envvars.ExpandCommand(c.Args, envs),
		WorkingDir: c.WorkingDir,
		Envs:       envs,
		Mounts:     mounts,
		Devices:    devices,
		LogPath:    filepath.Join(c.Name, strconv.Itoa(next.Attempt)+".log"),
		Stdin:      c.Stdin,
		StdinOnce:  c.StdinOnce,
		Tty:        c.TTY,
		Labels: map[string]string{
			cri.LabelPodName:       pod.Name,
			cri.LabelPodNamespace:  pod.Namespace,
			cri.LabelPodUID:        string(pod.UID),
			cri.LabelContainerName: c.Name,
		},
		Annotations: containerAnnotations(pod, c, next.RestartCount),
		Linux:       linux,
	}
	if d := m.deps.Devices; d != nil {
		if err := d.ApplyDevices(ctx, pod, c, cfg); err != nil {
			return nil, next, configErrorf(err, "adding the devices of container %s", c.Name)
		}
	}
	// What the runtime is told at creation is what the container runs with:
	// the baseline of its next resize.
	if err := m.deps.Actuated.SetContainer(pod.UID, c.Name, c.Resources); err != nil {
		return nil, next, configErrorf(err, "recording the resources of container %s", c.Name)
	}
	return cfg, next, nil
}

// nextInstanceOf numbers the container's next instance, removing first an
// instance whose start was cut off (it fails with errLeftoverBusy while the
// runtime is still starting that one).
func (m *Manager) nextInstanceOf(ctx context.Context, pod *v1.Pod, st *pleg.PodStatus, c *v1.Container) (instanceNumbers, error) {
	instances := instancesByName(st)[c.Name]
	cutRemoved, logDirNext := false, 0
	if len(instances) > 0 {
		if prev := instances[0]; cri.StartWasCut(prev) {
			// Never ran: a nodelet killed between CreateContainer and StartContainer
			// left it created, or a nodelet or runtime crash cut its start off. It
			// goes first and its replacement takes its place (it never ran: no
			// restart), so the pod never has two instances of the container.
			switch err := m.removeLeftover(ctx, pod, prev); {
			case err == nil:
				cutRemoved = true
			case errors.Is(err, errLeftoverBusy):
				return instanceNumbers{}, err
			default:
				// The runtime will not let it go (containerd keeps a task a cut
				// NewTask created after all: "cannot delete running task"). Waiting
				// for it would keep the pod from ever starting: the replacement
				// takes the next attempt instead, beside it, and still counts no restart.
				klog.FromContext(ctx).Info("Could not remove a container whose start was cut off; starting the next attempt beside it",
					"pod", klog.KObj(pod), "container", c.Name, "containerID", prev.GetId(), "attempt", prev.GetMetadata().GetAttempt(), "err", err)
			}
		}
	} else if m.cfg.PodLogsDir != "" {
		// No instance left in the runtime (never run, or removed): the count
		// goes on from the logs earlier instances left, as upstream, so a new
		// instance never writes into an old one's log.
		logDirNext = restartCountFromLogDir(filepath.Join(PodLogDir(m.cfg.PodLogsDir, pod), c.Name))
	}
	return nextInstance(instances, cutRemoved, logDirNext), nil
}

// runContainer creates and starts the container from cfg, then runs its
// postStart hook; a failure moves its crash-loop back-off on.
func (m *Manager) runContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig, next instanceNumbers,
	sandboxID string, sbCfg *runtimeapi.PodSandboxConfig, podIPs []string) (*podstatus.Waiting, error) {
	release, err := m.startSlots.acquire(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("waiting to create container %s: %w", c.Name, err)
	}
	id, err := m.deps.Runtime.CreateContainer(ctx, sandboxID, cfg, sbCfg)
	if err != nil {
		release()
		m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		m.backoff.Next(BackoffKey(pod, c), m.deps.Clock.Now())
		return &podstatus.Waiting{Reason: "CreateContainerError", Message: err.Error()}, fmt.Errorf("creating container %s: %w", c.Name, err)
	}
	m.deps.Recorder.Eventf(pod, v1.EventTypeNormal, "Created", "Created container: %s", c.Name)
	err = m.deps.Runtime.StartContainer(ctx, id)
	release()
	if err != nil {
		m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
		m.backoff.Next(BackoffKey(pod, c), m.deps.Clock.Now())
		return &podstatus.Waiting{Reason: "RunContainerError", Message: err.Error()}, fmt.Errorf("starting container %s: %w", c.Name, err)
	}
	if next.RestartCount > 0 {
		// Every restart moves the crash-loop back-off on (10s, 20s, ... up to the max).
		m.backoff.Next(BackoffKey(pod, c), m.deps.Clock.Now())
	}
	m.deps.Recorder.Eventf(pod, v1.EventTypeNormal, "Started", "Started container %s", c.Name)
	klog.FromContext(ctx).V(2).Info("Started container", "pod", klog.KObj(pod), "container", c.Name,
		"containerID", id, "restartCount", next.RestartCount, "attempt", next.Attempt)
	if err := m.runPostStart(ctx, pod, c, id, firstIP(podIPs)); err != nil {
		m.backoff.Next(BackoffKey(pod, c), m.deps.Clock.Now())
		return &podstatus.Waiting{Reason: "PostStartHookError", Message: err.Error()}, err
	}
	return nil, nil
}

// errLeftoverBusy says a container left created could not be removed yet: a
// StartContainer of the nodelet that created it is still running in the
// runtime. The sync is tried again shortly; nothing failed.
var errLeftoverBusy = errors.New("a container left created by an earlier nodelet is still being started by the runtime")

// leftoverRetry is how soon a pod whose leftover container is busy is synced again.
const leftoverRetry = time.Second

// removeLeftover removes a container whose start was cut off (cri.StartWasCut).
func (m *Manager) removeLeftover(ctx context.Context, pod *v1.Pod, prev *runtimeapi.ContainerStatus) error {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "container", containerName(prev), "containerID", prev.GetId())
	err := m.deps.Runtime.RemoveContainer(ctx, prev.GetId())
	switch {
	case err == nil || isNotFound(err):
		logger.Info("Removed a container whose start was cut off (never ran) before creating its replacement", "state", prev.GetState(), "reason", prev.GetReason(),
			"attempt", prev.GetMetadata().GetAttempt())
		m.removeLeftoverLog(ctx, prev)
		return nil
	case cri.IsContainerBusy(err):
		logger.Info("Container whose start was cut off is still being started by the runtime; syncing the pod again shortly", "err", err, "retryAfter", leftoverRetry)
		return fmt.Errorf("removing container %s: %w: %w", prev.GetId(), errLeftoverBusy, err)
	default:
		return fmt.Errorf("removing container %s whose start was cut off: %w", prev.GetId(), err)
	}
}

// removeLeftoverLog removes the log of a removed container whose start was cut
// off, as upstream removes a removed container's: containerd creates the file
// before the task a cut NewTask never ran, and once no instance is left a file
// left would count as a restart (restartCountFromLogDir). Only once the
// container is gone: a start still in flight may yet run it and write there. A
// failure is logged: the replacement takes the same attempt, and the same file.
func (m *Manager) removeLeftoverLog(ctx context.Context, prev *runtimeapi.ContainerStatus) {
	p := prev.GetLogPath()
	if p == "" || m.cfg.PodLogsDir == "" {
		return
	}
	if err := logrotate.RemoveLogs(m.cfg.PodLogsDir, p); err != nil && !errors.Is(err, logrotate.ErrNotBelowPodLogsDir) {
		klog.FromContext(ctx).Error(err, "Removing the log of a container whose start was cut off", "containerID", prev.GetId())
	}
}

// mounts turns volumeMounts into CRI mounts, plus the termination-message file and
// the managed /etc/hosts. envs is the container's environment, for subPathExpr.
func (m *Manager) mounts(ctx context.Context, pod *v1.Pod, c *v1.Container, vols map[string]volumes.HostVolume, envs []*runtimeapi.KeyValue, attempt int) ([]*runtimeapi.Mount, error) {
	var out []*runtimeapi.Mount
	hasEtcHosts := false
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		hv, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %q of container %s names no volume of the pod", vm.Name, c.Name)
		}
		host := hv.Path
		sub, err := subPathOf(vm, envs)
		if err != nil {
			return nil, err
		}
		if hv.Image != nil {
			mnt, err := imageMount(vm, hv, sub)
			if err != nil {
				return nil, err
			}
			out = append(out, mnt)
			continue
		}
		if sub != "" {
			if host, err = m.prepareSubPath(ctx, pod, c, i, hv, sub); err != nil {
				return nil, err
			}
		}
		if vm.MountPath == "/etc/hosts" {
			hasEtcHosts = true
		}
		prop := runtimeapi.MountPropagation_PROPAGATION_PRIVATE
		if vm.MountPropagation != nil {
			switch *vm.MountPropagation {
			case v1.MountPropagationHostToContainer:
				prop = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			case v1.MountPropagationBidirectional:
				prop = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
			}
		}
		out = append(out, &runtimeapi.Mount{
			ContainerPath:  vm.MountPath,
			HostPath:       host,
			Readonly:       vm.ReadOnly || hv.ReadOnly,
			SelinuxRelabel: hv.SELinuxRelabel,
			Propagation:    prop,
		})
	}
	if !hasEtcHosts {
		if p := m.hostsFilePath(pod.UID); fileExists(p) {
			out = append(out, &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: p})
		}
	}
	if c.TerminationMessagePath != "" {
		dir := filepath.Join(m.PodDir(pod.UID), "containers", c.Name)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("creating termination message directory: %w", err)
		}
		f := filepath.Join(dir, strconv.Itoa(attempt)) // one file per instance
		if err := os.WriteFile(f, nil, 0o666); err != nil {
			return nil, fmt.Errorf("creating termination message file: %w", err)
		}
		// The container may run as any user; it must be able to write its message.
		_ = os.Chmod(f, 0o666)
		out = append(out, &runtimeapi.Mount{ContainerPath: c.TerminationMessagePath, HostPath: f})
	}
	return out, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (m *Manager) hostsFilePath(uid types.UID) string {
	return filepath.Join(m.PodDir(uid), "etc-hosts")
}

// writeHostsFile writes the pod's managed /etc/hosts: the host's file for
// host-network pods, a generated one naming the pod's IPs otherwise.
func (m *Manager) writeHostsFile(pod *v1.Pod, podIPs []string) error {
	var b strings.Builder
	if pod.Spec.HostNetwork {
		data, err := os.ReadFile("/etc/hosts")
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("reading host /etc/hosts: %w", err)
		}
		b.WriteString("# Kubernetes-managed hosts file (host network).\n")
		b.Write(data)
	} else {
		b.WriteString("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		host, _ := podHostname(pod)
		for _, ip := range podIPs {
			name := host
			// With hostnameOverride the pod has no domain (upstream), so no FQDN line.
			if pod.Spec.Subdomain != "" && m.cfg.ClusterDomain != "" && ptr.Deref(pod.Spec.HostnameOverride, "") == "" {
				name = fmt.Sprintf("%s.%s.%s.svc.%s\t%s", host, pod.Spec.Subdomain, pod.Namespace, m.cfg.ClusterDomain, host)
			}
			fmt.Fprintf(&b, "%s\t%s\n", ip, name)
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, ha := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", ha.IP, strings.Join(ha.Hostnames, "\t"))
		}
	}
	p := m.hostsFilePath(pod.UID)
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return fmt.Errorf("creating pod directory: %w", err)
	}
	// Written on every sync: only when it differs, and atomically, so a running
	// container never reads a half-written file and a full disk or a crash never
	// leaves it truncated (a truncated one differs, and is written again).
	// Containers started earlier keep the file they mounted.
	if cur, err := os.ReadFile(p); err == nil && string(cur) == b.String() {
		return nil
	}
	if err := atomicfile.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing pod hosts file: %w", err)
	}
	return nil
}

// linuxContainerConfig maps resources and the security context. targetID
// (ephemeral containers) puts the container in that container's process
// namespace; img is the image's user.
func (m *Manager) linuxContainerConfig(pod *v1.Pod, c *v1.Container, sbCfg *runtimeapi.PodSandboxConfig, targetID string, img imageUserInfo) (*runtimeapi.LinuxContainerConfig, error) {
	res, warnings := cgroups.ContainerResources(pod, c, m.memoryCapacity(), m.cfg.Resources)
	for _, w := range warnings {
		klog.V(2).InfoS("Container resources", "pod", klog.KObj(pod), "container", c.Name, "warning", w)
	}
	if m.deps.CPUs != nil {
		// Upstream sets the cpuset at creation too, so a pinned container
		// never runs a moment on the shared pool.
		res.CpusetCpus = m.deps.CPUs.CPUSetFor(pod.UID, c.Name)
	}
	if m.deps.Memory != nil {
		// The NUMA nodes of the container's memory, as upstream sets them at
		// creation (the memory manager never moves them afterwards).
		res.CpusetMems = m.deps.Memory.MemsFor(pod.UID, c.Name)
	}
	sc, err := containerSecurityContext(pod, c, m.securityOptions(), img)
	if err != nil {
		return nil, err
	}
	sc.NamespaceOptions = containerNamespaces(sbCfg.GetLinux().GetSecurityContext().GetNamespaceOptions(), targetID)
	return &runtimeapi.LinuxContainerConfig{Resources: res, SecurityContext: sc}, nil
}

// containerNamespaces are the sandbox's namespace options, with the process
// namespace of the target container when there is one. As upstream, a target
// only matters when each container has its own process namespace: with a
// shared (pod) or host one, the ephemeral container already sees the target.
func containerNamespaces(sandbox *runtimeapi.NamespaceOption, targetID string) *runtimeapi.NamespaceOption {
	if targetID == "" || sandbox.GetPid() != runtimeapi.NamespaceMode_CONTAINER {
		return sandbox
	}
	// A copy: the sandbox's options are shared by every container of the sync.
	return &runtimeapi.NamespaceOption{
		Network:       sandbox.GetNetwork(),
		Pid:           runtimeapi.NamespaceMode_TARGET,
		Ipc:           sandbox.GetIpc(),
		TargetId:      targetID,
		UsernsOptions: sandbox.GetUsernsOptions(),
	}
}

func (m *Manager) memoryCapacity() int64 {
	n := m.deps.Node()
	if n.MemoryCapacity > 0 {
		return n.MemoryCapacity
	}
	return n.Allocatable.Memory().Value()
}

var (
	errNeverPull        = errors.New("image not present with pull policy Never")
	errInvalidImageName = errors.New("InvalidImageName") // upstream's ErrInvalidImageName
)

// pullPolicy defaults as the API server does: Always for :latest or no tag.
func pullPolicy(c *v1.Container) v1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	return podutil.DefaultPullPolicy(c.Image)
}

// imageBackoffKey keys the pull back-off by pod and image, as upstream: a
// container and an image volume of the same image share it.
func imageBackoffKey(pod *v1.Pod, image string) string {
	return string(pod.UID) + "_" + image
}

// ensureImage makes sure the container's image is present according to its
// pull policy, and returns its reference.
func (m *Manager) ensureImage(ctx context.Context, pod *v1.Pod, c *v1.Container, sbCfg *runtimeapi.PodSandboxConfig) (string, *podstatus.Waiting, error) {
	return m.ensureImageRef(ctx, pod, c.Image, pullPolicy(c), sbCfg)
}

// ensureImageRef makes sure image (a container's or an image volume's) is
// present according to policy, and returns its reference. With pull records,
// a present image is used only when the pod's credentials are good for it (or
// the policy exempts it); otherwise it is pulled with the pod's own
// credentials, or refused under Never.
func (m *Manager) ensureImageRef(ctx context.Context, pod *v1.Pod, image string, policy v1.PullPolicy, sbCfg *runtimeapi.PodSandboxConfig) (string, *podstatus.Waiting, error) {
	if w, err := m.checkImageName(pod, image); err != nil {
		return "", w, err
	}
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: image}
	present := ""
	if policy != v1.PullAlways {
		resp, err := m.deps.Images.ImageStatus(ctx, spec, false)
		if err != nil {
			return "", &podstatus.Waiting{Reason: "ErrImageInspect", Message: err.Error()}, fmt.Errorf("inspecting image %s: %w", image, err)
		}
		if resp.GetImage() != nil {
			present = resp.GetImage().GetId()
		}
	}
	// Secrets are fetched from the API server: at most once, and only when needed.
	creds := sync.OnceValue(func() []trackedAuth { return m.pullCredentials(ctx, pod, image) })
	records := m.deps.PullRecords
	if present != "" {
		if records == nil {
			m.deps.Recorder.Eventf(pod, v1.EventTypeNormal, "Pulled", "Container image %q already present on machine", image)
			return present, nil, nil
		}
		d := records.Verify(ctx, policy, image, present, func() []kubeletconfigv1beta1.ImagePullSecret { return podSecrets(creds()) })
		switch d.Action {
		case pullrecords.UsePresent:
			m.deps.Recorder.Eventf(pod, v1.EventTypeNormal, "Pulled", "Container image %q already present on machine and can be accessed by the pod", image)
			return present, nil, nil
		case pullrecords.RefuseNeverPull:
			klog.FromContext(ctx).V(2).Info("Refusing a present image", "pod", klog.KObj(pod), "image", image, "reason", d.Reason)
			return m.neverPull(pod, image)
		}
		klog.FromContext(ctx).V(2).Info("Pulling a present image to verify the pod's credentials", "pod", klog.KObj(pod), "image", image, "reason", d.Reason)
	} else if policy == v1.PullNever {
		return m.neverPull(pod, image)
	}
	key := imageBackoffKey(pod, image)
	if m.imageBackoff.IsInBackOffSinceUpdate(key, m.deps.Clock.Now()) {
		msg := fmt.Sprintf("Back-off pulling image %q", image)
		m.deps.Recorder.Eventf(pod, v1.EventTypeNormal, "BackOff", "%s", msg)
		return "", &podstatus.Waiting{Reason: "ImagePullBackOff", Message: msg}, nil
	}
	auths := append(slices.Clip(creds()), m.providerCredentials(ctx, image)...)
	m.deps.Recorder.Eventf(pod, v1.EventTypeNormal, "Pulling", "Pulling image %q", image)
	queued := m.deps.Clock.Now()
	select {
	case m.pullSlots <- struct{}{}:
	case <-ctx.Done():
		return "", nil, ctx.Err()
	}
	if records != nil {
		if err := records.RecordPullIntent(ctx, image); err != nil {
			<-m.pullSlots
			msg := fmt.Sprintf("Failed to record image pull intent for container image %q: %v", image, err)
			return "", &podstatus.Waiting{Reason: "ErrImagePull", Message: msg}, fmt.Errorf("pulling image %s: %w", image, err)
		}
	}
	start := m.deps.Clock.Now()
	ref, used, err := m.pullWithCredentials(ctx, spec, auths, sbCfg)
	<-m.pullSlots
	if records != nil {
		if err != nil {
			records.RecordImagePullFailed(ctx, image)
		} else {
			records.RecordImagePulled(ctx, image, ref, pulledWith(used))
		}
	}
	if err != nil {
		m.imageBackoff.Next(key, m.deps.Clock.Now())
		m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", image, err)
		// The runtime client's errors already say which image was being pulled.
		return "", &podstatus.Waiting{Reason: "ErrImagePull", Message: err.Error()}, err
	}
	m.imageBackoff.Reset(key)
	m.deps.Recorder.Eventf(pod, v1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %s (%s including waiting). Image size: %d bytes.",
		image, m.deps.Clock.Since(start).Round(time.Millisecond), m.deps.Clock.Since(queued).Round(time.Millisecond), m.imageSize(ctx, ref))
	return ref, nil, nil
}

// checkImageName refuses an image that does not parse as the docker reference
// grammar, as upstream: an InspectFailed event and an InvalidImageName waiting
// container with upstream's words ("Failed to apply default image tag ...").
func (m *Manager) checkImageName(pod *v1.Pod, image string) (*podstatus.Waiting, error) {
	w, err := invalidImageName(image)
	if err != nil {
		m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "InspectFailed", "%s", w.Message)
		m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %s", w.Reason)
	}
	return w, err
}

// invalidImageName decides whether image can be pulled by name: nil if it
// parses, otherwise the container's waiting state and the sync error.
func invalidImageName(image string) (*podstatus.Waiting, error) {
	if _, err := podutil.ParseImage(image); err != nil {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", image, err)
		return &podstatus.Waiting{Reason: "InvalidImageName", Message: msg}, fmt.Errorf("%s: %w", msg, errInvalidImageName)
	}
	return nil, nil
}

// neverPull fails a container whose image may not be pulled. A present image
// the pod may not use gets the same words as an absent one, as upstream: the
// pod must not learn that the image is on the node.
func (m *Manager) neverPull(pod *v1.Pod, image string) (string, *podstatus.Waiting, error) {
	msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
	m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "ErrImageNeverPull", "%s", msg)
	return "", &podstatus.Waiting{Reason: "ErrImageNeverPull", Message: msg}, fmt.Errorf("%s: %w", msg, errNeverPull)
}

// pullWithCredentials pulls anonymously when no credential applies, otherwise
// tries each matching credential in turn (most specific first) as upstream
// does, returning the aggregate of their errors when all fail. It says which
// credential pulled (nil: anonymous).
func (m *Manager) pullWithCredentials(ctx context.Context, spec *runtimeapi.ImageSpec, creds []trackedAuth, sbCfg *runtimeapi.PodSandboxConfig) (string, *trackedAuth, error) {
	// One token per image pull, whatever the number of credentials tried; upstream
	// does not wait for a token but fails the pull, which then backs off.
	if m.pullLimiter != nil && !m.pullLimiter.TryAccept() {
		return "", nil, errPullQPSExceeded
	}
	if len(creds) == 0 {
		ref, err := m.deps.Images.PullImage(ctx, spec, nil, sbCfg)
		return ref, nil, err
	}
	var errs []error
	for i := range creds {
		ref, err := m.deps.Images.PullImage(ctx, spec, creds[i].AuthConfig, sbCfg)
		if err == nil {
			return ref, &creds[i], nil
		}
		errs = append(errs, err)
	}
	return "", nil, utilerrors.NewAggregate(errs)
}

// imageSize reports the pulled image's size for the Pulled event; 0 if unknown.
func (m *Manager) imageSize(ctx context.Context, ref string) uint64 {
	resp, err := m.deps.Images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
	if err != nil {
		return 0
	}
	return resp.GetImage().GetSize()
}

// TerminationMessage reads what a terminated container left in its termination
// message file, falling back to the log tail when the policy asks for it.
func TerminationMessage(spec *v1.Container, st *runtimeapi.ContainerStatus) string {
	const maxBytes = 4096
	path := ""
	for _, mnt := range st.GetMounts() {
		if spec.TerminationMessagePath != "" && mnt.GetContainerPath() == spec.TerminationMessagePath {
			path = mnt.GetHostPath()
		}
	}
	if path != "" {
		if data, err := readAtMost(path, maxBytes, false); err == nil && len(data) > 0 {
			return string(data)
		}
	}
	if spec.TerminationMessagePolicy == v1.TerminationMessageFallbackToLogsOnError && st.ExitCode != 0 && st.GetLogPath() != "" {
		if data, err := readLogTail(st.GetLogPath(), 2048); err == nil {
			return criLogText(data)
		}
	}
	return ""
}

func readAtMost(path string, n int64, tail bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readFrom(f, n, tail)
}

// readLogTail reads the last n bytes of the container log at path, opened as
// the log API opens it: pods that mount /var/log can plant a link to a host
// file there (read into the pod's status) or a FIFO (which would block the
// sync), so no link below the pods' log directory is followed and only a
// regular file is opened.
func readLogTail(path string, n int64) ([]byte, error) {
	f, err := podlogs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the container log for the termination message: %w", err)
	}
	defer f.Close()
	return readFrom(f, n, true)
}

func readFrom(f *os.File, n int64, tail bool) ([]byte, error) {
	if tail {
		if fi, err := f.Stat(); err == nil && fi.Size() > n {
			if _, err := f.Seek(fi.Size()-n, 0); err != nil {
				return nil, err
			}
		}
	}
	buf := make([]byte, n)
	k, err := f.Read(buf)
	if err != nil && k == 0 {
		return nil, err
	}
	return buf[:k], nil
}

// criLogText strips the CRI log prefix (timestamp stream tag) from each line.
func criLogText(data []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) == 4 {
			b.WriteString(f[3])
			if f[2] == "F" {
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}
