package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// NodeIDAnnotation is the Node annotation holding a JSON map of driver name
// to the node ID each CSI driver reported (upstream's name: the external
// attacher and provisioner read it).
const NodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"

// nodeInfo is what a registered driver publishes about this node.
type nodeInfo struct {
	driver     string
	nodeID     string
	maxVolumes int64
	topology   map[string]string
}

// installOnNode records the driver's node ID in the Node's annotation
// (merged with the other drivers') and its topology segments as Node labels.
// A topology label already present with another value is refused, as
// upstream, rather than overwritten. It reports whether node changed.
func installOnNode(node *v1.Node, ni nodeInfo) (bool, error) {
	ids, err := nodeIDMap(node)
	if err != nil {
		return false, err
	}
	for k, v := range ni.topology {
		if cur, ok := node.Labels[k]; ok && cur != v {
			return false, fmt.Errorf("detected topology value collision: driver reported %q:%q but existing label is %q:%q", k, v, k, cur)
		}
	}
	changed := false
	if cur, ok := ids[ni.driver]; !ok || cur != ni.nodeID {
		ids[ni.driver] = ni.nodeID
		b, err := json.Marshal(ids)
		if err != nil {
			return false, fmt.Errorf("encoding node ID map with driverName=%q, nodeID=%q: %w", ni.driver, ni.nodeID, err)
		}
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[NodeIDAnnotation] = string(b)
		changed = true
	}
	for k, v := range ni.topology {
		if cur, ok := node.Labels[k]; ok && cur == v {
			continue
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[k] = v
		changed = true
	}
	return changed, nil
}

// uninstallFromNode drops the driver from the node ID annotation (the
// annotation goes when no driver is left). Topology labels stay, as
// upstream: another driver may report the same keys.
func uninstallFromNode(node *v1.Node, driver string) (bool, error) {
	ids, err := nodeIDMap(node)
	if err != nil {
		return false, err
	}
	if _, ok := ids[driver]; !ok {
		return false, nil
	}
	delete(ids, driver)
	if len(ids) == 0 {
		delete(node.Annotations, NodeIDAnnotation)
		return true, nil
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return false, fmt.Errorf("encoding node ID map without driver %q: %w", driver, err)
	}
	node.Annotations[NodeIDAnnotation] = string(b)
	return true, nil
}

// nodeIDMap parses the node ID annotation; never nil without an error.
func nodeIDMap(node *v1.Node) (map[string]string, error) {
	ids := map[string]string{}
	if s := node.Annotations[NodeIDAnnotation]; s != "" {
		if err := json.Unmarshal([]byte(s), &ids); err != nil {
			return nil, fmt.Errorf("failed to parse node's %q annotation value (%q) err=%w", NodeIDAnnotation, s, err)
		}
		if ids == nil { // the annotation said "null"
			ids = map[string]string{}
		}
	}
	return ids, nil
}

// newCSINode is the CSINode of node without drivers: named like the node
// and owned by it (as upstream, so it goes with the Node).
func newCSINode(node *v1.Node) *storagev1.CSINode {
	return &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{
			Name: node.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Node",
				Name:       node.Name,
				UID:        node.UID,
			}},
		},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{}},
	}
}

// csiNodeDriver is the spec.drivers[] entry of a driver: topology keys
// sorted, allocatable.count only for a positive limit (capped to int32).
func csiNodeDriver(ni nodeInfo) storagev1.CSINodeDriver {
	keys := make([]string, 0, len(ni.topology))
	for k := range ni.topology {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	d := storagev1.CSINodeDriver{Name: ni.driver, NodeID: ni.nodeID, TopologyKeys: keys}
	if ni.maxVolumes > 0 {
		n := int32(min(ni.maxVolumes, math.MaxInt32))
		d.Allocatable = &storagev1.VolumeNodeResources{Count: &n}
	}
	return d
}

// installOnCSINode puts the driver's entry in cn (replacing one of the same
// name, keeping the others and their order) and reports whether it changed.
func installOnCSINode(cn *storagev1.CSINode, ni nodeInfo) bool {
	want := csiNodeDriver(ni)
	i := slices.IndexFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == ni.driver })
	if i >= 0 {
		if sameDriverEntry(cn.Spec.Drivers[i], want) {
			return false
		}
		cn.Spec.Drivers = slices.Delete(slices.Clone(cn.Spec.Drivers), i, i+1)
	}
	cn.Spec.Drivers = append(cn.Spec.Drivers, want)
	return true
}

func sameDriverEntry(a, b storagev1.CSINodeDriver) bool {
	ak, bk := slices.Clone(a.TopologyKeys), slices.Clone(b.TopologyKeys)
	sort.Strings(ak)
	sort.Strings(bk)
	return a.NodeID == b.NodeID && slices.Equal(ak, bk) && allocatableCount(a) == allocatableCount(b)
}

func allocatableCount(d storagev1.CSINodeDriver) int64 {
	if d.Allocatable == nil || d.Allocatable.Count == nil {
		return -1
	}
	return int64(*d.Allocatable.Count)
}

// uninstallFromCSINode drops the driver's entry; the CSINode itself stays.
func uninstallFromCSINode(cn *storagev1.CSINode, driver string) bool {
	i := slices.IndexFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == driver })
	if i < 0 {
		return false
	}
	cn.Spec.Drivers = slices.Delete(slices.Clone(cn.Spec.Drivers), i, i+1)
	return true
}

// nodeMetaPatch is a JSON merge patch carrying the annotation and labels
// that changed from old to updated, with old's resourceVersion as a
// precondition so a concurrent writer makes it fail with a conflict.
func nodeMetaPatch(old, updated *v1.Node) ([]byte, error) {
	diff := func(a, b map[string]string) map[string]any {
		out := map[string]any{}
		for k, v := range b {
			if cur, ok := a[k]; !ok || cur != v {
				out[k] = v
			}
		}
		for k := range a {
			if _, ok := b[k]; !ok {
				out[k] = nil
			}
		}
		return out
	}
	meta := map[string]any{"resourceVersion": old.ResourceVersion}
	if d := diff(old.Annotations, updated.Annotations); len(d) > 0 {
		meta["annotations"] = d
	}
	if d := diff(old.Labels, updated.Labels); len(d) > 0 {
		meta["labels"] = d
	}
	return json.Marshal(map[string]any{"metadata": meta})
}

// apiPublisher writes drivers' node information to the API server.
type apiPublisher struct {
	client   kubernetes.Interface
	nodeName string
	// mu serializes the registry's own writes (as upstream's node info
	// manager): two drivers' read-modify-writes of the one annotation
	// must not interleave even where no resourceVersion conflict says so.
	mu sync.Mutex
}

// install publishes a registered driver: Node annotation and labels first,
// then the CSINode entry (created with the CSINode when missing).
func (p *apiPublisher) install(ctx context.Context, ni nodeInfo) error {
	if ni.nodeID == "" {
		return fmt.Errorf("error adding CSI driver node info: driverNodeID must not be empty")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.updateNode(ctx, func(n *v1.Node) (bool, error) { return installOnNode(n, ni) }); err != nil {
		return fmt.Errorf("error updating Node object with CSI driver node info: %w", err)
	}
	if err := p.updateCSINode(ctx, true, func(cn *storagev1.CSINode) bool { return installOnCSINode(cn, ni) }); err != nil {
		return fmt.Errorf("error updating CSINode object with CSI driver node info: %w", err)
	}
	return nil
}

// uninstall removes a driver's entry from CSINode and the annotation.
func (p *apiPublisher) uninstall(ctx context.Context, driver string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.updateCSINode(ctx, false, func(cn *storagev1.CSINode) bool { return uninstallFromCSINode(cn, driver) }); err != nil {
		return fmt.Errorf("error uninstalling CSI driver from CSINode object: %w", err)
	}
	if err := p.updateNode(ctx, func(n *v1.Node) (bool, error) { return uninstallFromNode(n, driver) }); err != nil {
		return fmt.Errorf("error removing CSI driver node info from Node object: %w", err)
	}
	return nil
}

// updateNode applies change to a fresh copy of the Node and patches the
// metadata that changed, again from a fresh read on a conflict.
func (p *apiPublisher) updateNode(ctx context.Context, change func(*v1.Node) (bool, error)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		old, err := p.client.CoreV1().Nodes().Get(ctx, p.nodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting node %q: %w", p.nodeName, err)
		}
		node := old.DeepCopy()
		changed, err := change(node)
		if err != nil || !changed {
			return err
		}
		patch, err := nodeMetaPatch(old, node)
		if err != nil {
			return fmt.Errorf("computing patch of node %q: %w", p.nodeName, err)
		}
		if _, err := p.client.CoreV1().Nodes().Patch(ctx, p.nodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patching node %q: %w", p.nodeName, err)
		}
		return nil
	})
}

// updateCSINode applies change to the node's CSINode and updates it; when
// the CSINode is missing it is created (create) or left missing.
func (p *apiPublisher) updateCSINode(ctx context.Context, create bool, change func(*storagev1.CSINode) bool) error {
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	return retry.OnError(retry.DefaultRetry, retriable, func() error {
		csiNodes := p.client.StorageV1().CSINodes()
		cn, err := csiNodes.Get(ctx, p.nodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if !create {
				return nil
			}
			node, err := p.client.CoreV1().Nodes().Get(ctx, p.nodeName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("getting node %q to own its CSINode: %w", p.nodeName, err)
			}
			cn = newCSINode(node)
			change(cn)
			if _, err := csiNodes.Create(ctx, cn, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating CSINode %q: %w", p.nodeName, err)
			}
			klog.InfoS("Created CSINode", "node", p.nodeName)
			return nil
		}
		if err != nil {
			return fmt.Errorf("getting CSINode %q: %w", p.nodeName, err)
		}
		cn = cn.DeepCopy()
		if !change(cn) {
			return nil
		}
		if _, err := csiNodes.Update(ctx, cn, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating CSINode %q: %w", p.nodeName, err)
		}
		return nil
	})
}
