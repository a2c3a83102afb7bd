// Package node owns the Node object of this machine: the machine facts, registration, the
// periodic status update (capacity/allocatable, nodeInfo, addresses, conditions) and the
// Lease heartbeat in kube-node-lease.
//
// Ready's reasons are upstream's words in upstream's order (several as [a,
// b]). The runtime's health, asked every 5 s by the agent, updates the status
// as soon as it changes: "container runtime is down" at the first failed
// Status, "container runtime not ready: RuntimeReady=false reason:...
// message:...", "container runtime network not ready: NetworkReady=false ...".
// Reservation gives the node allocatable reservation that the memory manager
// checks reservedMemory against; AdmissionNode is the Node object syncloop's
// admission reads.
//
// The Lease is renewed by nodelet's own loop (lease.go), which follows the steps of
// k8s.io/component-helpers/apimachinery/lease (optimistic update from the cached lease,
// GET/Create with 100 ms..7 s back-off, five updates re-reading on conflict, the heartbeat
// failure hook from the second failed update on) rather than running that controller. Tried
// and measured (issue 34): its loop (wait.JitterUntil) and its back-off (time.After) wait on
// real time, not on the injected clock, so TestRun's renewal at 10 s on the fake clock never
// comes and TestLeaseEnsureBacksOff cannot step the back-off; and it has no wake on
// registration, so a Lease created before the Node would wait a whole renewal interval for
// its owner reference to the Node (TestLeaseOwnedOnceRegistered passed only by waiting ~10 s
// of real time).
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/config"
)

const (
	nodeStatusUpdateRetry        = 5
	leaseRenewIntervalFraction   = 0.25
	jitterFactor                 = 0.04
	maxLeaseUpdateRetries        = 5
	maxNamesPerImageInNodeStatus = 5
	initialBackoff               = 100 * time.Millisecond
	maxBackoff                   = 7 * time.Second
	runtimeAPIVersion            = "0.1.0"
	nodeLeaseNamespace           = "kube-node-lease"
	nodeReadyGracePeriod         = 120 * time.Second
	fastReadyPollPeriod          = 100 * time.Millisecond
)

// Config is what the controller needs from the command line and the KubeletConfiguration.
type Config struct {
	NodeName string
	// Hostname is the machine's hostname (after --hostname-override): the Hostname address and
	// the kubernetes.io/hostname label. Empty means NodeName.
	Hostname string
	// NodeIPs is --node-ip; empty means detect. An unspecified address (0.0.0.0 or ::) means
	// detect an address of that family.
	NodeIPs []net.IP
	Labels  map[string]string // --node-labels, applied at registration
	// Settings are the KubeletConfiguration's node values, resolved (config.Resolve).
	Settings config.NodeSettings
	RootDir  string // its filesystem sizes ephemeral-storage
	Version  string // nodeInfo.kubeletVersion
	// ExternalCloudProvider is --cloud-provider=external: the Node registers with the
	// uninitialized taint and leaves its addresses to the cloud controller manager.
	ExternalCloudProvider bool
	// AppArmorEnabled says the host enforces AppArmor: a ready node says so in
	// its Ready condition's message, as upstream's does.
	AppArmorEnabled bool
}

// Runtime is the part of the CRI runtime service the controller uses.
type Runtime interface {
	Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error)
}

// ImageLister is the part of the CRI image service used to report node images.
type ImageLister interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
}

// RuntimeStatuser is the part of the CRI runtime service that reports runtime handlers and
// features.
type RuntimeStatuser interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// ReadinessFunc returns the reasons the node is not ready (PLEG unhealthy, runtime down,
// shutting down, ...); none means ready.
type ReadinessFunc func() []string

// Pressure is the node pressure seen by the eviction manager.
type Pressure struct {
	Memory bool
	Disk   bool
	PID    bool
}

// Option customises a Controller.
type Option func(*Controller)

// DeviceCapacity is the device plugins' extended resources
// (devicemanager.Manager): capacity, allocatable, and the resources dropped
// since, which the node reports at zero.
type DeviceCapacity interface {
	Capacity() (capacity, allocatable v1.ResourceList, deleted []string)
}

// WithDevices adds the device plugins' resources to the node's status.
func WithDevices(d DeviceCapacity) Option { return func(c *Controller) { c.devices = d } }

// WithPressure sets the source of the pressure conditions; without it no pressure is reported.
func WithPressure(f func() Pressure) Option { return func(c *Controller) { c.pressure = f } }

// WithEventRecorder records NodeReady/NodeNotReady/NodeHas... events on condition changes.
func WithEventRecorder(r record.EventRecorder) Option { return func(c *Controller) { c.recorder = r } }

// WithImageLister reports the runtime's images in status.images (largest first, capped at
// nodeStatusMaxImages).
func WithImageLister(l ImageLister) Option { return func(c *Controller) { c.images = l } }

// WithRuntimeStatus reports the runtime's handlers (status.runtimeHandlers) and features
// (status.features.supplementalGroupsPolicy) from CRI Status.
func WithRuntimeStatus(s RuntimeStatuser) Option { return func(c *Controller) { c.runtimeStatus = s } }

// WithVolumesInUse reports node.status.volumesInUse: the attachable volumes
// the node has mounted or is about to mount, which the attach/detach
// controller must not detach.
func WithVolumesInUse(f func() []v1.UniqueVolumeName) Option {
	return func(c *Controller) { c.volumesInUse = f }
}

// WithMachineInfo uses the given machine facts instead of reading the host.
func WithMachineInfo(mi MachineInfo) Option {
	return func(c *Controller) { c.machine = mi; c.machineSet = true }
}

// WithOnRepeatedHeartbeatFailure is called when a lease renewal or status update fails more
// than once in a row (the lead closes the heartbeat client's idle connections there).
func WithOnRepeatedHeartbeatFailure(f func()) Option {
	return func(c *Controller) { c.onHeartbeatFailure = f }
}

// WithPodCIDRUpdater hands the Node's spec.podCIDRs (comma-joined), once the control
// plane set them, to f on every status update, as upstream passes them to the runtime;
// f says whether they changed, which forces a status patch.
func WithPodCIDRUpdater(f func(ctx context.Context, cidrs string) (bool, error)) Option {
	return func(c *Controller) { c.podCIDRs = f }
}

// Controller registers the Node and keeps its status and Lease fresh.
type Controller struct {
	client, heartbeat kubernetes.Interface
	cfg               Config
	rt                Runtime
	ready             ReadinessFunc
	clk               clock.Clock

	pressure           func() Pressure
	recorder           record.EventRecorder
	images             ImageLister
	runtimeStatus      RuntimeStatuser
	volumesInUse       func() []v1.UniqueVolumeName
	onHeartbeatFailure func()
	podCIDRs           func(ctx context.Context, cidrs string) (bool, error)
	devices            DeviceCapacity

	machine               MachineInfo
	machineSet            bool
	capacity, allocatable v1.ResourceList
	registerNode          bool
	taints                []v1.Taint
	providerID            string
	port                  int32
	maxImages             int32
	updateFrequency       time.Duration
	reportFrequency       time.Duration
	leaseDuration         time.Duration

	// reservation is kubeReserved + systemReserved + the hard eviction
	// thresholds (upstream's node allocatable reservation).
	reservation v1.ResourceList

	// Address detection; replaced in tests.
	lookupIP       func(host string) ([]net.IP, error)
	interfaceAddrs func() ([]net.Addr, error)
	defaultRouteIP func() (net.IP, error)

	trigger chan struct{}
	// registeredCh is signalled once the Node is registered, so a Lease created
	// before its UID was known gets its owner reference at once, not at the
	// next renewal up to 10s later.
	registeredCh chan struct{}

	mu             sync.Mutex
	node           *v1.Node
	registered     bool
	lastReport     time.Time
	runtimeVersion string

	// latestLease is touched only by the lease loop.
	latestLease *coordinationv1.Lease
}

// New builds a Controller. client may be nil (standalone: no registration, no status, no
// lease; Capacity and Allocatable still work). heartbeatClient may be nil to use client.
func New(client, heartbeatClient kubernetes.Interface, cfg Config, rt Runtime, ready ReadinessFunc, clk clock.Clock, opts ...Option) (*Controller, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("creating node controller: empty node name")
	}
	if err := ValidateNodeLabels(cfg.Labels); err != nil {
		return nil, fmt.Errorf("creating node controller: %w", err)
	}
	if cfg.Hostname == "" {
		cfg.Hostname = cfg.NodeName
	}
	kc := cfg.Settings
	if heartbeatClient == nil {
		heartbeatClient = client
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := &Controller{
		client:          client,
		heartbeat:       heartbeatClient,
		cfg:             cfg,
		rt:              rt,
		ready:           ready,
		clk:             clk,
		registerNode:    kc.RegisterNode,
		taints:          kc.RegisterWithTaints,
		providerID:      kc.ProviderID,
		port:            kc.Port,
		maxImages:       kc.MaxImages,
		updateFrequency: kc.UpdateFrequency,
		reportFrequency: kc.ReportFrequency,
		leaseDuration:   kc.LeaseDuration,
		lookupIP:        net.LookupIP,
		interfaceAddrs:  net.InterfaceAddrs,
		defaultRouteIP:  chooseHostInterface,
		trigger:         make(chan struct{}, 1),
		registeredCh:    make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(c)
	}
	if !c.machineSet {
		mi, err := ReadMachineInfo(cfg.RootDir)
		if err != nil {
			return nil, fmt.Errorf("creating node controller: %w", err)
		}
		c.machine = mi
	}

	kubeReserved, err := ParseReserved("kubeReserved", kc.KubeReserved)
	if err != nil {
		return nil, fmt.Errorf("creating node controller: %w", err)
	}
	systemReserved, err := ParseReserved("systemReserved", kc.SystemReserved)
	if err != nil {
		return nil, fmt.Errorf("creating node controller: %w", err)
	}
	if kc.ReservedSystemCPUs != "" {
		// Upstream: reservedSystemCPUs replaces systemReserved's cpu with the size of that set.
		cpus, err := parseCPUList(kc.ReservedSystemCPUs)
		if err != nil {
			return nil, fmt.Errorf("creating node controller: reservedSystemCPUs: %w", err)
		}
		systemReserved[v1.ResourceCPU] = *newCPUQuantity(countUnique(cpus))
	}
	thresholds, err := parseEvictionHard(kc.EvictionHard)
	if err != nil {
		return nil, fmt.Errorf("creating node controller: %w", err)
	}
	c.capacity = computeCapacity(c.machine, kc.MaxPods, kc.PodsPerCore)
	c.reservation = computeReservation(c.capacity, kubeReserved, systemReserved, thresholds)
	c.allocatable = computeAllocatable(c.capacity, c.reservation)
	return c, nil
}

func countUnique(xs []int) int {
	seen := map[int]struct{}{}
	for _, x := range xs {
		seen[x] = struct{}{}
	}
	return len(seen)
}

// Node returns a copy of the last Node object seen from the API server; nil before
// registration (or before the first status update when registerNode is false).
func (c *Controller) Node() *v1.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.node == nil {
		return nil
	}
	return c.node.DeepCopy()
}

func (c *Controller) setNode(n *v1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.node = n.DeepCopy()
}

// Capacity is the node capacity computed from the machine facts.
func (c *Controller) Capacity() v1.ResourceList { return c.capacity.DeepCopy() }

// Reservation is kubeReserved + systemReserved + the hard eviction
// thresholds, per resource: what the memory manager's reservedMemory must
// add up to, as upstream's node allocatable reservation.
func (c *Controller) Reservation() v1.ResourceList { return c.reservation.DeepCopy() }

// Allocatable is capacity minus kubeReserved, systemReserved and hard eviction thresholds.
func (c *Controller) Allocatable() v1.ResourceList { return c.allocatable.DeepCopy() }

// MachineInfo returns the machine facts in use.
func (c *Controller) MachineInfo() MachineInfo { return c.machine }

// TriggerStatusUpdate asks the status loop for an update now (readiness changed).
func (c *Controller) TriggerStatusUpdate() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Run runs the status loop and the lease loop until ctx is done. It registers the Node first
// if Register has not succeeded yet. For the first two minutes it also polls readiness every
// 100ms and reports the node Ready as soon as it is. Without a client it only waits for ctx.
func (c *Controller) Run(ctx context.Context) {
	if c.client == nil {
		<-ctx.Done()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.runLease(ctx) })
	wg.Go(func() { c.runStatus(ctx) })
	wg.Go(func() { c.runFastReadyUpdate(ctx) })
	wg.Wait()
}

func (c *Controller) runStatus(ctx context.Context) {
	for {
		if err := c.Register(ctx); err != nil {
			return // ctx done
		}
		if err := c.updateNodeStatus(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Unable to update node status", "node", c.cfg.NodeName)
		}
		t := c.clk.NewTimer(jitter(c.updateFrequency))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-c.trigger:
			t.Stop()
		case <-t.C():
		}
	}
}

// runFastReadyUpdate watches readiness closely during startup, as upstream does, so the
// node turns Ready as soon as it is, not up to nodeStatusUpdateFrequency later.
func (c *Controller) runFastReadyUpdate(ctx context.Context) {
	deadline := c.clk.Now().Add(nodeReadyGracePeriod)
	for c.clk.Now().Before(deadline) {
		if c.ready == nil || len(c.ready()) == 0 {
			c.TriggerStatusUpdate()
			return
		}
		if !c.sleep(ctx, fastReadyPollPeriod) {
			return
		}
	}
}

func (c *Controller) runLease(ctx context.Context) {
	interval := time.Duration(float64(c.leaseDuration) * leaseRenewIntervalFraction)
	for {
		c.syncLease(ctx)
		if !c.waitLeaseRenewal(ctx, jitter(interval)) {
			return
		}
	}
}

// waitLeaseRenewal waits until the lease is due, or until the Node registers while the lease
// has no owner yet (it is renewed at once to take the Node as owner). A registration signal
// for an already owned lease keeps the same timer, so the renewal stays on its interval.
// False when ctx ended.
func (c *Controller) waitLeaseRenewal(ctx context.Context, d time.Duration) bool {
	t := c.clk.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-c.registeredCh:
			if c.latestLease == nil || len(c.latestLease.OwnerReferences) == 0 {
				return true
			}
		case <-t.C():
			return true
		}
	}
}

// sleep waits d on the injected clock; false when ctx ended first.
func (c *Controller) sleep(ctx context.Context, d time.Duration) bool {
	t := c.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

func nextBackoff(d time.Duration) time.Duration { return min(2*d, maxBackoff) }
