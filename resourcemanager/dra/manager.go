package dra

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// driverClients gives the DRA service of a registered driver (Plugins).
type driverClients interface {
	client(driver string) (drapb.DRAPluginClient, error)
}

// Manager prepares and unprepares pods' ResourceClaims.
type Manager struct {
	client  kubernetes.Interface // nil standalone: pods with claims cannot run
	drivers driverClients
	path    string

	// opMu serializes preparations and unpreparations, so a claim shared by
	// pods is never prepared and unprepared at once.
	opMu sync.Mutex
	// mu guards claims, which container creation reads while a driver call runs.
	mu     sync.RWMutex
	claims map[string]*claimEntry // by namespace/name
}

// claimEntry is a claim's state and whether it was prepared since the start:
// as upstream, claims from the checkpoint are prepared again (drivers'
// NodePrepareResources is idempotent) before a pod uses them.
type claimEntry struct {
	ClaimState
	prepared bool
}

func key(namespace, name string) string { return namespace + "/" + name }

// New returns the manager of the claims checkpointed under rootDir. A
// checkpoint that does not decode stops the start, as upstream's: the
// claims it lists could never be unprepared.
func New(rootDir string, client kubernetes.Interface, plugins *Plugins) (*Manager, error) {
	m := &Manager{client: client, path: filepath.Join(rootDir, StateFileName), claims: map[string]*claimEntry{}}
	if plugins != nil {
		m.drivers = plugins
	}
	states, err := readState(m.path)
	if err != nil {
		return nil, fmt.Errorf("could not initialize the DRA checkpoint, please drain the node and remove the DRA state file %s: %w", m.path, err)
	}
	for _, s := range states {
		if s.DriverState == nil {
			s.DriverState = map[string]DriverState{}
		}
		if s.PodUIDs == nil {
			s.PodUIDs = map[string]struct{}{}
		}
		m.claims[key(s.Namespace, s.ClaimName)] = &claimEntry{ClaimState: s}
	}
	return m, nil
}

// lookup is the state of a claim by name in namespace.
func (m *Manager) lookup(namespace string) func(string) (ClaimState, bool) {
	return func(name string) (ClaimState, bool) {
		e, ok := m.claims[key(namespace, name)]
		if !ok {
			return ClaimState{}, false
		}
		return e.ClaimState, true
	}
}

// checkpoint writes the claims; called with mu held.
func (m *Manager) checkpoint() error {
	states := make([]ClaimState, 0, len(m.claims))
	for _, e := range m.claims {
		states = append(states, e.ClaimState)
	}
	return writeState(m.path, states)
}

// PrepareResources prepares the pod's claims with their drivers before its
// sandbox is created; an error leaves the pod waiting for the next sync.
func (m *Manager) PrepareResources(ctx context.Context, pod *v1.Pod) error {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	if err := m.prepare(ctx, pod); err != nil {
		return fmt.Errorf("prepare dynamic resources: %w", err)
	}
	return nil
}

// checkedClaim is a claim that passed the checks, ready to prepare.
type checkedClaim struct {
	claim *resourceapi.ResourceClaim
	state ClaimState
}

func (m *Manager) prepare(ctx context.Context, pod *v1.Pod) error {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	pcs, err := podClaims(pod)
	if err != nil {
		return err
	}
	if len(pcs) == 0 {
		return nil
	}
	if m.client == nil {
		return errors.New("ResourceClaims are read from the API server, and nodelet runs without one")
	}
	// Everything is checked before the state changes, as upstream: a pod
	// that fails here (no driver, not reserved) can go without anything to
	// unprepare.
	checked := make([]checkedClaim, 0, len(pcs))
	for _, pc := range pcs {
		claim, err := m.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, pc.claimName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("fetch ResourceClaim %s: %w", pc.claimName, err)
		}
		if err := checkClaim(pod, pc, claim); err != nil {
			return err
		}
		st := newClaimState(claim)
		for _, d := range driversFor(st, resourceapi.SkipNodeOperationNodePrepareResources) {
			if _, err := m.driverClient(d); err != nil {
				return err
			}
		}
		checked = append(checked, checkedClaim{claim: claim, state: st})
	}

	m.opMu.Lock()
	defer m.opMu.Unlock()
	batches := map[string][]*drapb.Claim{}
	m.mu.Lock()
	for _, c := range checked {
		k := key(c.claim.Namespace, c.claim.Name)
		e, ok := m.claims[k]
		if !ok {
			e = &claimEntry{ClaimState: c.state}
			m.claims[k] = e
		} else if e.ClaimUID != c.claim.UID {
			m.mu.Unlock()
			return fmt.Errorf("old ResourceClaim with same name %s and different UID %s still exists (previous pod force-deleted?!)", c.claim.Name, e.ClaimUID)
		}
		e.PodUIDs[string(pod.UID)] = struct{}{}
		if e.prepared {
			continue
		}
		for _, d := range driversFor(e.ClaimState, resourceapi.SkipNodeOperationNodePrepareResources) {
			batches[d] = append(batches[d], &drapb.Claim{Namespace: e.Namespace, Uid: string(e.ClaimUID), Name: e.ClaimName})
		}
	}
	// The pod is recorded before any driver call, so a pod that goes away
	// after a partial preparation still gets its claims unprepared.
	err = m.checkpoint()
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("checkpoint ResourceClaim cache: %w", err)
	}

	for _, d := range sortedKeys(batches) {
		claims := batches[d]
		cl, err := m.driverClient(d)
		if err != nil {
			return err
		}
		callCtx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := cl.NodePrepareResources(callCtx, &drapb.NodePrepareResourcesRequest{Claims: claims})
		cancel()
		if err != nil {
			return fmt.Errorf("NodePrepareResources: %w", err)
		}
		errs := map[string]string{}
		for uid, result := range resp.GetClaims() {
			errs[uid] = result.GetError()
		}
		if err := checkResults("NodePrepareResources", claims, errs); err != nil {
			return err
		}
		for uid, result := range resp.GetClaims() {
			req := findClaim(claims, uid)
			m.mu.Lock()
			if e, ok := m.claims[key(req.Namespace, req.Name)]; ok {
				ds := e.DriverState[d]
				ds.Devices = nil
				for _, dev := range result.GetDevices() {
					ds.Devices = append(ds.Devices, Device{PoolName: dev.GetPoolName(), DeviceName: dev.GetDeviceName(),
						ShareID: (*types.UID)(dev.ShareId), RequestNames: dev.GetRequestNames(), CDIDeviceIDs: dev.GetCdiDeviceIds()})
				}
				e.DriverState[d] = ds
			}
			m.mu.Unlock()
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range checked {
		if e, ok := m.claims[key(c.claim.Namespace, c.claim.Name)]; ok {
			if !e.prepared {
				logger.Info("Prepared ResourceClaim", "claim", klog.KObj(c.claim), "claimUID", c.claim.UID)
			}
			e.prepared = true
		}
	}
	if err := m.checkpoint(); err != nil {
		return fmt.Errorf("checkpoint ResourceClaim state: %w", err)
	}
	return nil
}

// UnprepareResources ends the pod's use of its claims once its containers
// are stopped: a claim no other pod uses is unprepared with its drivers and
// leaves the checkpoint. Idempotent; an error is retried by the caller.
func (m *Manager) UnprepareResources(ctx context.Context, pod *v1.Pod) error {
	if err := m.unprepare(ctx, pod.UID, pod.Namespace); err != nil {
		return fmt.Errorf("unprepare dynamic resources: %w", err)
	}
	return nil
}

func (m *Manager) unprepare(ctx context.Context, uid types.UID, namespace string) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	var names []string
	for _, e := range m.claims {
		if _, ok := e.PodUIDs[string(uid)]; ok && e.Namespace == namespace {
			names = append(names, e.ClaimName)
		}
	}
	if len(names) == 0 {
		m.mu.Unlock()
		return nil
	}
	sort.Strings(names)
	d := decideUnprepare(uid, names, m.lookup(namespace))
	for _, n := range d.detach {
		delete(m.claims[key(namespace, n)].PodUIDs, string(uid))
	}
	batches := map[string][]*drapb.Claim{}
	for _, n := range d.unprepare {
		e := m.claims[key(namespace, n)]
		for _, drv := range driversFor(e.ClaimState, resourceapi.SkipNodeOperationNodeUnprepareResources) {
			batches[drv] = append(batches[drv], &drapb.Claim{Namespace: e.Namespace, Uid: string(e.ClaimUID), Name: e.ClaimName})
		}
	}
	m.mu.Unlock()

	for _, drv := range sortedKeys(batches) {
		claims := batches[drv]
		cl, err := m.driverClient(drv)
		if err != nil {
			return err
		}
		callCtx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := cl.NodeUnprepareResources(callCtx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
		cancel()
		if err != nil {
			return fmt.Errorf("NodeUnprepareResources: %w", err)
		}
		errs := map[string]string{}
		for uid, result := range resp.GetClaims() {
			errs[uid] = result.GetError()
		}
		if err := checkResults("NodeUnprepareResources", claims, errs); err != nil {
			return err
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range d.unprepare {
		delete(m.claims, key(namespace, n))
		klog.FromContext(ctx).Info("Unprepared ResourceClaim", "claim", klog.KRef(namespace, n), "podUID", uid)
	}
	if err := m.checkpoint(); err != nil {
		return fmt.Errorf("checkpoint ResourceClaim state: %w", err)
	}
	return nil
}

// ApplyDevices adds the CDI devices of the claims container c names to
// its CRI config. As upstream since 1.31, only the CDIDevices field carries
// them (no CDI annotations).
func (m *Manager) ApplyDevices(_ context.Context, pod *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	if len(c.Resources.Claims) == 0 {
		return nil
	}
	m.mu.RLock()
	ids, err := containerCDIDevices(pod, c, m.lookup(pod.Namespace))
	m.mu.RUnlock()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !slices.ContainsFunc(cfg.CDIDevices, func(d *runtimeapi.CDIDevice) bool { return d.GetName() == id }) {
			cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: id})
		}
	}
	return nil
}

// Claims is a copy of the claims the manager holds, for tests and status.
func (m *Manager) Claims() []ClaimState {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]ClaimState, 0, len(m.claims))
	for _, e := range m.claims {
		s := e.ClaimState
		s.PodUIDs = maps.Clone(s.PodUIDs)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClaimUID < out[j].ClaimUID })
	return out
}

func (m *Manager) driverClient(driver string) (drapb.DRAPluginClient, error) {
	if m.drivers == nil {
		return nil, fmt.Errorf("DRA driver %s is not registered", driver)
	}
	return m.drivers.client(driver)
}

// checkResults judges a driver's answer for claims (its per-claim errors by
// claim UID), in upstream's wording: every claim answered, no other, none
// failed.
func checkResults(op string, claims []*drapb.Claim, errs map[string]string) error {
	for _, uid := range sortedKeys(errs) {
		req := findClaim(claims, uid)
		if req == nil {
			return fmt.Errorf("%s returned result for unknown claim UID %s", op, uid)
		}
		if errs[uid] != "" {
			return fmt.Errorf("%s failed for ResourceClaim %s: %s", op, req.Name, errs[uid])
		}
	}
	if n := len(claims) - len(errs); n != 0 {
		return fmt.Errorf("%s skipped %d ResourceClaims", op, n)
	}
	return nil
}

func findClaim(claims []*drapb.Claim, uid string) *drapb.Claim {
	for _, c := range claims {
		if c.Uid == uid {
			return c
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
