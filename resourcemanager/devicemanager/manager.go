// Package devicemanager is the kubelet's device plugin manager: plugins
// register on <root>/device-plugins/kubelet.sock (deviceplugin v1beta1), their
// ListAndWatch streams become the node's extended resources, and admission
// allocates devices to containers through the plugins' Allocate. The decision
// of which devices a container gets is decide.go's pure functions; this file
// executes it over gRPC and keeps the checkpoint.
//
// Registration checks the version, the extended resource name and that the
// endpoint is a socket directly in the device-plugins dir (no link); the
// plugins' sockets there are removed at start, as upstream, so plugins
// register again. One client per plugin follows ListAndWatch into capacity
// (all devices) and allocatable (the healthy ones); when a plugin goes, its
// allocatable drops to 0, and after 5 minutes it is dropped and reported at 0.
//
// The pure Decide, Complete and NextReusable choose the devices (those already
// held, init containers' devices reused, free healthy ones, then the plugin's
// GetPreferredAllocation); the Manager executes that at admission with
// Allocate, per container for the topology manager (NUMA hints from the
// devices' Topology.Nodes; the chosen affinity's devices first, as upstream's
// filterByAffinity). ApplyDevices calls PreStartContainer when the plugin asks
// for it and puts env, mounts, devices, annotations and CDI devices into the
// CRI config. Devices of pods no longer active are freed once the sync loop
// has synced its sources. Assignments (device IDs per NUMA node, upstream's
// DevicesPerNUMA; the older plain ID list still loads) and Allocate answers
// are kept in kubelet_internal_checkpoint (internal/checkpoint).
package devicemanager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

const (
	// DirName is the device plugin directory under the root directory.
	DirName = "device-plugins"
	// SocketName is the registration socket in the device plugin directory.
	SocketName = "kubelet.sock"
	// DefaultStopGracePeriod is how long a resource whose plugin went away
	// stays in capacity (at allocatable 0) before it is dropped, as upstream.
	DefaultStopGracePeriod = 5 * time.Minute
	preStartTimeout        = pluginapi.KubeletPreStartContainerRPCTimeoutInSecs * time.Second
	stopTimeout            = 5 * time.Second
)

// Manager is the device plugin manager.
type Manager struct {
	dir   string
	clock clock.Clock
	grace time.Duration
	// numaNodes are the machine's NUMA nodes, for topology hints.
	numaNodes []int

	// allocMu serializes allocations so each decision sees the previous ones.
	allocMu sync.Mutex

	mu        sync.Mutex
	resources map[string]*resourceState
	// gone are resources dropped after the grace period, reported at zero
	// until a plugin advertises them again.
	gone   map[string]bool
	pods   map[types.UID]map[string]map[string]*assignment // pod → container → resource
	closed bool
	wg     sync.WaitGroup // endpoint goroutines
}

type resourceState struct {
	healthy, unhealthy []string
	// numa are every device's NUMA nodes from the plugin (none: no topology).
	numa map[string][]int
	ep   *endpoint // nil after a restart until the plugin registers again
	// stoppedAt is when the resource's plugin went away; zero while one serves.
	stoppedAt time.Time
}

type assignment struct {
	ids []string
	// numa are the devices' NUMA nodes when they were allocated (nil:
	// unknown, from an old checkpoint, until the plugin reports them).
	numa map[string][]int
	resp *pluginapi.ContainerAllocateResponse
}

type endpoint struct {
	resource string
	opts     *pluginapi.DevicePluginOptions
	client   pluginapi.DevicePluginClient
	cancel   context.CancelFunc
}

// New loads the checkpoint in dir (<root>/device-plugins). Resources it
// names start with no devices and a plugin just gone, so their pods keep their
// devices and the plugins have the grace period to register again.
// numaNodes are the machine's NUMA nodes the topology hints range over.
func New(dir string, clk clock.Clock, numaNodes []int) (*Manager, error) {
	m := &Manager{
		dir: dir, clock: clk, grace: DefaultStopGracePeriod, numaNodes: numaNodes,
		resources: map[string]*resourceState{},
		gone:      map[string]bool{},
		pods:      map[types.UID]map[string]map[string]*assignment{},
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("creating the device plugin directory: %w", err)
	}
	cp, err := readCheckpoint(m.checkpointPath())
	switch {
	case errors.Is(err, errCorrupt):
		// A corrupt checkpoint loses assignments, not the node: running
		// containers keep their devices, new ones may get them too.
		aside, serr := atomicfile.SetAside(m.checkpointPath(), clk.Now())
		klog.ErrorS(err, "Starting without the device checkpoint", "setAsideTo", aside, "setAsideErr", serr)
		cp = checkpointData{}
	case err != nil:
		return nil, fmt.Errorf("loading the device plugin manager's state: %w", err)
	}
	now := clk.Now()
	for res := range cp.RegisteredDevices {
		m.resources[res] = &resourceState{stoppedAt: now}
	}
	for _, e := range cp.PodDeviceEntries {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			klog.ErrorS(err, "Dropping a device checkpoint entry whose Allocate answer does not decode", "podUID", e.PodUID, "container", e.ContainerName, "resource", e.ResourceName)
			continue
		}
		m.assign(types.UID(e.PodUID), e.ContainerName, e.ResourceName, &assignment{ids: e.DeviceIDs, numa: e.NUMA, resp: resp})
		// Topology hints for pods re-admitted before their plugin is back
		// see the assigned devices' NUMA nodes.
		if rs := m.resources[e.ResourceName]; rs != nil && e.NUMA != nil {
			if rs.numa == nil {
				rs.numa = map[string][]int{}
			}
			maps.Copy(rs.numa, e.NUMA)
		}
	}
	return m, nil
}

func (m *Manager) checkpointPath() string { return filepath.Join(m.dir, CheckpointName) }

// Run serves the registration socket until ctx is done, then stops every
// plugin client and waits for them.
func (m *Manager) Run(ctx context.Context) error {
	// Plugin clients end with this context, also when serving fails.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sock := filepath.Join(m.dir, SocketName)
	// Upstream empties the directory at start: plugins watch for kubelet.sock
	// to be recreated and register again. Only sockets go; the checkpoint stays.
	if err := removeSockets(m.dir); err != nil {
		return fmt.Errorf("cleaning the device plugin directory: %w", err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listening on the device plugin registration socket: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, &registration{m: m, ctx: ctx})
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(l) }()
	klog.InfoS("Device plugin registration socket serving", "path", sock)
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	stopServer(srv, stopTimeout)
	if err == nil {
		<-serveErr
	}
	// A Register handler still running finds closed set and starts nothing,
	// so the Wait below sees every endpoint goroutine.
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	cancel()
	m.wg.Wait()
	if err != nil {
		return fmt.Errorf("serving the device plugin registration socket: %w", err)
	}
	return nil
}

// stopServer stops srv gracefully, but not longer than timeout: a plugin
// keeping its registration connection open must not hold up nodelet's stop.
func stopServer(srv *grpc.Server, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		srv.Stop()
		<-done
	}
}

func removeSockets(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

type registration struct {
	pluginapi.UnimplementedRegistrationServer
	m   *Manager
	ctx context.Context // Run's: plugin clients live as long as the manager
}

// Register checks the request as upstream and starts a client for the plugin.
func (r *registration) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	klog.InfoS("Got registration request from device plugin", "resource", req.ResourceName, "endpoint", req.Endpoint)
	if err := r.m.validate(req); err != nil {
		klog.ErrorS(err, "Refusing device plugin registration", "resource", req.ResourceName)
		return &pluginapi.Empty{}, err
	}
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if r.m.closed {
		return &pluginapi.Empty{}, fmt.Errorf("device manager is stopping")
	}
	r.m.wg.Add(1)
	go func() {
		defer r.m.wg.Done()
		r.m.runEndpoint(r.ctx, req)
	}()
	return &pluginapi.Empty{}, nil
}

func (m *Manager) validate(req *pluginapi.RegisterRequest) error {
	supported := false
	for _, v := range pluginapi.SupportedVersions {
		if req.Version == v {
			supported = true
		}
	}
	if !supported {
		return fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", req.Version, pluginapi.Version)
	}
	if !podutil.IsExtendedResourceName(v1.ResourceName(req.ResourceName)) {
		return fmt.Errorf("the ResourceName %q is invalid", req.ResourceName)
	}
	// The endpoint is a socket directly in our directory: no path, no link.
	if req.Endpoint == "" || req.Endpoint != filepath.Base(req.Endpoint) || req.Endpoint == "." || req.Endpoint == ".." || req.Endpoint == SocketName {
		return fmt.Errorf("invalid device plugin endpoint %q: must be a socket name in %s", req.Endpoint, m.dir)
	}
	fi, err := os.Lstat(filepath.Join(m.dir, req.Endpoint))
	if err != nil {
		return fmt.Errorf("checking device plugin endpoint %q: %w", req.Endpoint, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("device plugin endpoint %q is not a socket", req.Endpoint)
	}
	return nil
}

// runEndpoint connects to the plugin and follows its ListAndWatch until the
// stream ends or ctx is done; the plugin it replaces is stopped.
func (m *Manager) runEndpoint(ctx context.Context, req *pluginapi.RegisterRequest) {
	res := req.ResourceName
	sock := filepath.Join(m.dir, req.Endpoint)
	conn, err := grpc.NewClient("passthrough:///"+sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		klog.ErrorS(err, "Connecting to device plugin", "resource", res, "endpoint", sock)
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ep := &endpoint{resource: res, opts: req.Options, client: pluginapi.NewDevicePluginClient(conn), cancel: cancel}
	if ep.opts == nil {
		ep.opts = &pluginapi.DevicePluginOptions{}
	}

	m.mu.Lock()
	rs := m.resources[res]
	if rs == nil {
		rs = &resourceState{}
		m.resources[res] = rs
	}
	if old := rs.ep; old != nil {
		old.cancel()
	}
	delete(m.gone, res)
	rs.ep = ep
	m.mu.Unlock()

	stream, err := ep.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err == nil {
		klog.InfoS("Device plugin registered", "resource", res, "endpoint", sock)
		for {
			var resp *pluginapi.ListAndWatchResponse
			if resp, err = stream.Recv(); err != nil {
				break
			}
			m.updateDevices(ep, resp.Devices)
		}
	}
	if ctx.Err() == nil {
		klog.ErrorS(err, "Device plugin's ListAndWatch ended", "resource", res, "endpoint", sock)
	}
	// A plugin gone leaves its devices in capacity but none allocatable
	// until it comes back or the grace period ends (upstream's
	// markResourceUnhealthy).
	m.mu.Lock()
	if rs.ep == ep {
		rs.ep = nil
		rs.stoppedAt = m.clock.Now()
		rs.unhealthy = append(rs.unhealthy, rs.healthy...)
		rs.healthy = nil
	}
	m.mu.Unlock()
}

func (m *Manager) updateDevices(ep *endpoint, devs []*pluginapi.Device) {
	var healthy, unhealthy []string
	numa := map[string][]int{}
	for _, d := range devs {
		numa[d.ID] = nil
		for _, n := range d.GetTopology().GetNodes() {
			numa[d.ID] = append(numa[d.ID], int(n.GetID()))
		}
		if d.Health == pluginapi.Healthy {
			healthy = append(healthy, d.ID)
		} else {
			unhealthy = append(unhealthy, d.ID)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := m.resources[ep.resource]
	if rs == nil || rs.ep != ep {
		return
	}
	rs.healthy, rs.unhealthy, rs.numa, rs.stoppedAt = sorted(healthy), sorted(unhealthy), numa, time.Time{}
	// Assignments from a checkpoint that did not keep NUMA nodes learn them now.
	for _, cs := range m.pods {
		for _, rss := range cs {
			if a := rss[ep.resource]; a != nil && a.numa == nil {
				a.numa = numaOf(a.ids, numa)
			}
		}
	}
	klog.InfoS("Device plugin updated its devices", "resource", ep.resource, "healthy", len(healthy), "unhealthy", len(unhealthy))
	m.storeLocked()
}

// Capacity is the device resources' capacity (healthy and unhealthy devices)
// and allocatable (healthy ones), and the resources dropped since their
// plugin went away longer than the grace period ago, which the node reports
// at zero as upstream (every call, so any caller may ask).
func (m *Manager) Capacity() (capacity, allocatable v1.ResourceList, deleted []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	now := m.clock.Now()
	for res, rs := range m.resources {
		if rs.ep == nil && !rs.stoppedAt.IsZero() && now.Sub(rs.stoppedAt) > m.grace {
			delete(m.resources, res)
			m.gone[res] = true
			m.storeLocked()
			continue
		}
		capacity[v1.ResourceName(res)] = *resource.NewQuantity(int64(len(rs.healthy)+len(rs.unhealthy)), resource.DecimalSI)
		allocatable[v1.ResourceName(res)] = *resource.NewQuantity(int64(len(rs.healthy)), resource.DecimalSI)
	}
	for res := range m.gone {
		deleted = append(deleted, res)
	}
	sort.Strings(deleted)
	return capacity, allocatable, deleted
}

// AdmissionAllocatable is allocatable as admission should judge it: per
// resource, at least the devices already assigned, so that pods holding
// devices pass the resource fit again while their plugin is away (a nodelet
// restart before the plugin registers again), as upstream's
// sanitizeNodeAllocatable.
func (m *Manager) AdmissionAllocatable() v1.ResourceList {
	m.mu.Lock()
	defer m.mu.Unlock()
	counts := map[string]int{}
	for res, rs := range m.resources {
		counts[res] = len(rs.healthy)
	}
	assigned := map[string]int{}
	for _, cs := range m.pods {
		for _, rss := range cs {
			for res, a := range rss {
				assigned[res] += len(a.ids)
			}
		}
	}
	for res, n := range assigned {
		counts[res] = max(counts[res], n)
	}
	out := v1.ResourceList{}
	for res, n := range counts {
		out[v1.ResourceName(res)] = *resource.NewQuantity(int64(n), resource.DecimalSI)
	}
	return out
}

func (m *Manager) assign(uid types.UID, container, res string, a *assignment) {
	if m.pods[uid] == nil {
		m.pods[uid] = map[string]map[string]*assignment{}
	}
	if m.pods[uid][container] == nil {
		m.pods[uid][container] = map[string]*assignment{}
	}
	m.pods[uid][container][res] = a
}

// storeLocked writes the checkpoint; a failure is logged, as the state in
// memory stays right and the next change writes again.
func (m *Manager) storeLocked() {
	d := checkpointData{RegisteredDevices: map[string][]string{}}
	for res, rs := range m.resources {
		d.RegisteredDevices[res] = append([]string{}, rs.healthy...)
	}
	for uid, cs := range m.pods {
		for c, rss := range cs {
			for res, a := range rss {
				blob, err := proto.Marshal(a.resp)
				if err != nil {
					klog.ErrorS(err, "Serializing a device assignment for the checkpoint", "podUID", uid, "container", c, "resource", res)
					continue
				}
				d.PodDeviceEntries = append(d.PodDeviceEntries, podDeviceEntry{PodUID: string(uid), ContainerName: c, ResourceName: res, DeviceIDs: a.ids, NUMA: a.numa, AllocResp: blob})
			}
		}
	}
	sort.Slice(d.PodDeviceEntries, func(i, j int) bool {
		a, b := d.PodDeviceEntries[i], d.PodDeviceEntries[j]
		if a.PodUID != b.PodUID {
			return a.PodUID < b.PodUID
		}
		if a.ContainerName != b.ContainerName {
			return a.ContainerName < b.ContainerName
		}
		return a.ResourceName < b.ResourceName
	})
	if err := writeCheckpoint(m.checkpointPath(), d); err != nil {
		klog.ErrorS(err, "Failed to write the device checkpoint")
	}
}

// FreeInactive frees the devices of every pod but admitting and active, as
// upstream does before each allocation once the pod sources are ready; before
// (a restart re-admitting the pods one by one) the caller must not call it,
// or a pod not re-admitted yet would lose its devices.
func (m *Manager) FreeInactive(admitting types.UID, active []*v1.Pod) {
	keep := map[types.UID]bool{admitting: true}
	for _, p := range active {
		keep[p.UID] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for uid := range m.pods {
		if !keep[uid] {
			delete(m.pods, uid)
			changed = true
		}
	}
	if changed {
		m.storeLocked()
	}
}

// containerKind is how the container's devices pass to the pod's later ones.
func containerKind(pod *v1.Pod, name string) ContainerKind {
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.Name == name {
			if podutil.IsRestartableInitContainer(c) {
				return SidecarContainer
			}
			return InitContainer
		}
	}
	return AppContainer
}

// reusableLocked are the devices of res that the pod's init containers
// before container hold and no long-running container before it took since:
// the container may take them again, as upstream's devicesToReuse. Callers
// hold mu.
func (m *Manager) reusableLocked(pod *v1.Pod, container, res string) []string {
	var reusable []string
	for _, c := range podutil.AllContainers(pod) {
		if c.Name == container {
			break
		}
		a := m.pods[pod.UID][c.Name][res]
		if a == nil {
			continue
		}
		reusable = NextReusable(reusable, a.ids, containerKind(pod, c.Name))
	}
	return reusable
}

// Allocate gives one container its devices, init containers being allocated
// first by the caller (the topology manager), along the chosen NUMA affinity
// (empty: none). The error's text is upstream's, for the pod's admission
// message.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod, c *v1.Container, affinity topologymanager.Hint) error {
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	names := make([]string, 0, len(c.Resources.Limits))
	for name := range c.Resources.Limits {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, res := range names {
		q := c.Resources.Limits[v1.ResourceName(res)]
		if err := m.allocateContainer(ctx, pod, c.Name, res, int(q.Value()), affinity.Affinity); err != nil {
			return err
		}
	}
	return nil
}

// inUseLocked are the devices of res any pod holds; held says some pod holds
// an assignment of res (its plugin may be gone). Callers hold mu.
func (m *Manager) inUseLocked(res string) (ids []string, held bool) {
	for _, cs := range m.pods {
		for _, rss := range cs {
			if a := rss[res]; a != nil {
				held = true
				ids = append(ids, a.ids...)
			}
		}
	}
	return ids, held
}

// allocateContainer gives the container its devices of res; nothing when res
// is no device plugin resource.
func (m *Manager) allocateContainer(ctx context.Context, pod *v1.Pod, container, res string, count int, affinity topologymanager.BitMask) error {
	uid := pod.UID
	m.mu.Lock()
	rs := m.resources[res]
	need := Need{Resource: res, Count: count, Registered: rs != nil, Reusable: m.reusableLocked(pod, container, res)}
	inUse, held := m.inUseLocked(res)
	need.InUse = inUse
	if rs == nil && !held {
		m.mu.Unlock()
		return nil
	}
	if a := m.pods[uid][container][res]; a != nil {
		need.Assigned = a.ids
	}
	var (
		ep   *endpoint
		numa map[string][]int
	)
	if rs != nil {
		need.Healthy, ep, numa = rs.healthy, rs.ep, rs.numa
	}
	m.mu.Unlock()

	plan, err := Decide(need)
	if err != nil {
		return err
	}
	if plan.Size == 0 {
		return nil
	}
	if ep == nil {
		return fmt.Errorf("endpoint for %s has been stopped", res)
	}
	plan = Align(plan, affinity, numa)
	var preferred []string
	if plan.NeedsPreference() && ep.opts.GetPreferredAllocationAvailable {
		resp, err := ep.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   append(append([]string{}, plan.Chosen...), plan.Available...),
			MustIncludeDeviceIDs: plan.MustInclude(),
			AllocationSize:       int32(plan.Size),
		}}})
		if err != nil {
			return fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %w", err)
		}
		if rs := resp.GetContainerResponses(); len(rs) > 0 {
			preferred = rs[0].DeviceIDs
		}
	}
	ids := Complete(plan, preferred)
	resp, err := ep.client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return fmt.Errorf("device plugin Allocate rpc failed with err: %w", err)
	}
	if len(resp.GetContainerResponses()) == 0 {
		return fmt.Errorf("no containers return in allocation response %v", resp)
	}
	m.mu.Lock()
	m.assign(uid, container, res, &assignment{ids: ids, numa: numaOf(ids, numa), resp: resp.ContainerResponses[0]})
	m.storeLocked()
	m.mu.Unlock()
	klog.InfoS("Allocated devices", "podUID", uid, "container", container, "resource", res, "devices", ids, "numaAffinity", affinity.String())
	return nil
}

// ApplyDevices puts the container's device allocations (env, mounts,
// devices, annotations, CDI devices) into its CRI config, calling the
// plugins' PreStartContainer first where they asked for it.
func (m *Manager) ApplyDevices(ctx context.Context, pod *v1.Pod, container *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	type held struct {
		res string
		a   *assignment
		ep  *endpoint
	}
	m.mu.Lock()
	var hs []held
	for res, a := range m.pods[pod.UID][container.Name] {
		h := held{res: res, a: a}
		if rs := m.resources[res]; rs != nil {
			h.ep = rs.ep
		}
		hs = append(hs, h)
	}
	m.mu.Unlock()
	if len(hs) == 0 {
		return nil
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].res < hs[j].res })
	for _, h := range hs {
		// A plugin not back since a restart: its options are unknown, as upstream.
		if h.ep == nil || !h.ep.opts.PreStartRequired {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, preStartTimeout)
		_, err := h.ep.client.PreStartContainer(cctx, &pluginapi.PreStartContainerRequest{DevicesIds: h.a.ids})
		cancel()
		if err != nil {
			return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %w", err)
		}
	}
	var envs []*runtimeapi.KeyValue
	var mounts []*runtimeapi.Mount
	envAt := map[string]int{}
	mountAt := map[string]bool{}
	deviceAt := map[string]bool{}
	cdiAt := map[string]bool{}
	for _, d := range cfg.Devices {
		deviceAt[d.ContainerPath] = true
	}
	for _, d := range cfg.CDIDevices {
		cdiAt[d.Name] = true
	}
	for _, h := range hs {
		r := h.a.resp
		keys := make([]string, 0, len(r.Envs))
		for k := range r.Envs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if i, ok := envAt[k]; ok {
				envs[i].Value = []byte(r.Envs[k])
				continue
			}
			envAt[k] = len(envs)
			envs = append(envs, &runtimeapi.KeyValue{Key: k, Value: []byte(r.Envs[k])})
		}
		for _, mnt := range r.Mounts {
			if mountAt[mnt.ContainerPath] {
				continue
			}
			mountAt[mnt.ContainerPath] = true
			mounts = append(mounts, &runtimeapi.Mount{ContainerPath: mnt.ContainerPath, HostPath: mnt.HostPath, Readonly: mnt.ReadOnly})
		}
		for _, d := range r.Devices {
			if deviceAt[d.ContainerPath] {
				continue
			}
			deviceAt[d.ContainerPath] = true
			cfg.Devices = append(cfg.Devices, &runtimeapi.Device{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
		}
		for k, v := range r.Annotations {
			if cfg.Annotations == nil {
				cfg.Annotations = map[string]string{}
			}
			if _, set := cfg.Annotations[k]; !set {
				cfg.Annotations[k] = v
			}
		}
		for _, d := range r.CdiDevices {
			if cdiAt[d.Name] {
				continue
			}
			cdiAt[d.Name] = true
			cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: d.Name})
		}
	}
	// Device env and mounts come before the container's own, which win, as
	// upstream builds its run options.
	cfg.Envs = append(envs, cfg.Envs...)
	cfg.Mounts = append(mounts, cfg.Mounts...)
	return nil
}

// ContainerDevices are the container's devices, for the pod resources API:
// per resource, grouped by the NUMA nodes they had when allocated (kept in
// the checkpoint, so also right after a restart), as upstream.
func (m *Manager) ContainerDevices(uid types.UID, container string) []*podresourcesapi.ContainerDevices {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*podresourcesapi.ContainerDevices
	for _, res := range slices.Sorted(maps.Keys(m.pods[uid][container])) {
		a := m.pods[uid][container][res]
		numa := a.numa
		if rs := m.resources[res]; numa == nil && rs != nil {
			numa = rs.numa
		}
		out = append(out, byNUMA(res, a.ids, numa, false)...)
	}
	return out
}

// numaOf is numa restricted to ids, every id present (no topology: empty);
// nil when numa is (nothing known).
func numaOf(ids []string, numa map[string][]int) map[string][]int {
	if numa == nil {
		return nil
	}
	out := make(map[string][]int, len(ids))
	for _, d := range ids {
		out[d] = slices.Clone(numa[d])
	}
	return out
}

// AllocatableDevices are the healthy devices, for the pod resources API: one
// entry per device and NUMA node, as upstream.
func (m *Manager) AllocatableDevices() []*podresourcesapi.ContainerDevices {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*podresourcesapi.ContainerDevices
	for _, res := range slices.Sorted(maps.Keys(m.resources)) {
		if rs := m.resources[res]; len(rs.healthy) > 0 {
			out = append(out, byNUMA(res, rs.healthy, rs.numa, true)...)
		}
	}
	return out
}
