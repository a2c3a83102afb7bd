package csi

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func nodeWith(ann, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", ResourceVersion: "7", Annotations: ann, Labels: labels}}
}

func TestInstallOnNode(t *testing.T) {
	zone := map[string]string{"topology.hostpath.csi/node": "n1"}
	for _, c := range []struct {
		name        string
		node        *v1.Node
		ni          nodeInfo
		wantChanged bool
		wantAnn     map[string]string
		wantLabels  map[string]string
		wantErr     string
	}{
		{name: "first driver", node: nodeWith(nil, nil), ni: nodeInfo{driver: "a", nodeID: "id-a", topology: zone}, wantChanged: true,
			wantAnn: map[string]string{NodeIDAnnotation: `{"a":"id-a"}`}, wantLabels: zone},
		{name: "merged with another driver, other annotations kept", node: nodeWith(map[string]string{NodeIDAnnotation: `{"b":"id-b"}`, "x": "y"}, map[string]string{"l": "v"}),
			ni: nodeInfo{driver: "a", nodeID: "id-a"}, wantChanged: true,
			wantAnn: map[string]string{NodeIDAnnotation: `{"a":"id-a","b":"id-b"}`, "x": "y"}, wantLabels: map[string]string{"l": "v"}},
		{name: "node ID changed", node: nodeWith(map[string]string{NodeIDAnnotation: `{"a":"old"}`}, nil),
			ni: nodeInfo{driver: "a", nodeID: "new"}, wantChanged: true, wantAnn: map[string]string{NodeIDAnnotation: `{"a":"new"}`}},
		{name: "already there", node: nodeWith(map[string]string{NodeIDAnnotation: `{"a":"id-a"}`}, zone),
			ni: nodeInfo{driver: "a", nodeID: "id-a", topology: zone}, wantAnn: map[string]string{NodeIDAnnotation: `{"a":"id-a"}`}, wantLabels: zone},
		{name: "topology collision", node: nodeWith(nil, map[string]string{"topology.hostpath.csi/node": "other"}),
			ni:      nodeInfo{driver: "a", nodeID: "id-a", topology: zone},
			wantErr: `detected topology value collision: driver reported "topology.hostpath.csi/node":"n1" but existing label is "topology.hostpath.csi/node":"other"`},
		{name: "bad annotation", node: nodeWith(map[string]string{NodeIDAnnotation: `{`}, nil), ni: nodeInfo{driver: "a", nodeID: "id-a"},
			wantErr: `failed to parse node's "csi.volume.kubernetes.io/nodeid" annotation value ("{")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			changed, err := installOnNode(c.node, c.ni)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if changed != c.wantChanged || !reflect.DeepEqual(c.node.Annotations, c.wantAnn) || !reflect.DeepEqual(c.node.Labels, c.wantLabels) {
				t.Errorf("changed %v annotations %v labels %v; want %v %v %v", changed, c.node.Annotations, c.node.Labels, c.wantChanged, c.wantAnn, c.wantLabels)
			}
		})
	}
}

func TestUninstallFromNode(t *testing.T) {
	for _, c := range []struct {
		name        string
		ann         map[string]string
		wantChanged bool
		wantAnn     map[string]string
	}{
		{name: "one of two", ann: map[string]string{NodeIDAnnotation: `{"a":"1","b":"2"}`}, wantChanged: true, wantAnn: map[string]string{NodeIDAnnotation: `{"b":"2"}`}},
		{name: "last one drops the annotation", ann: map[string]string{NodeIDAnnotation: `{"a":"1"}`, "x": "y"}, wantChanged: true, wantAnn: map[string]string{"x": "y"}},
		{name: "absent", ann: map[string]string{NodeIDAnnotation: `{"b":"2"}`}, wantAnn: map[string]string{NodeIDAnnotation: `{"b":"2"}`}},
		{name: "no annotation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			labels := map[string]string{"topology.hostpath.csi/node": "n1"}
			n := nodeWith(c.ann, labels)
			changed, err := uninstallFromNode(n, "a")
			if err != nil {
				t.Fatal(err)
			}
			if changed != c.wantChanged || !reflect.DeepEqual(n.Annotations, c.wantAnn) {
				t.Errorf("changed %v annotations %v; want %v %v", changed, n.Annotations, c.wantChanged, c.wantAnn)
			}
			if n.Labels["topology.hostpath.csi/node"] != "n1" {
				t.Errorf("topology label removed: %v", n.Labels)
			}
		})
	}
}

func TestNewCSINode(t *testing.T) {
	cn := newCSINode(nodeWith(nil, nil))
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "uid-n1"}}
	if cn.Name != "n1" || !reflect.DeepEqual(cn.OwnerReferences, want) || cn.Spec.Drivers == nil || len(cn.Spec.Drivers) != 0 {
		t.Errorf("CSINode = %+v", cn)
	}
}

func TestInstallOnCSINode(t *testing.T) {
	other := storagev1.CSINodeDriver{Name: "b", NodeID: "id-b"}
	entry := func(id string, keys []string, count *int32) storagev1.CSINodeDriver {
		d := storagev1.CSINodeDriver{Name: "a", NodeID: id, TopologyKeys: keys}
		if count != nil {
			d.Allocatable = &storagev1.VolumeNodeResources{Count: count}
		}
		return d
	}
	topo := map[string]string{"z": "1", "k": "2"}
	for _, c := range []struct {
		name        string
		drivers     []storagev1.CSINodeDriver
		ni          nodeInfo
		wantChanged bool
		want        []storagev1.CSINodeDriver
	}{
		{name: "added after the others", drivers: []storagev1.CSINodeDriver{other}, ni: nodeInfo{driver: "a", nodeID: "id-a", maxVolumes: 10, topology: topo},
			wantChanged: true, want: []storagev1.CSINodeDriver{other, entry("id-a", []string{"k", "z"}, ptr.To[int32](10))}},
		{name: "no limit: no allocatable", ni: nodeInfo{driver: "a", nodeID: "id-a"},
			wantChanged: true, want: []storagev1.CSINodeDriver{entry("id-a", []string{}, nil)}},
		{name: "limit capped to int32", ni: nodeInfo{driver: "a", nodeID: "id-a", maxVolumes: math.MaxInt64},
			wantChanged: true, want: []storagev1.CSINodeDriver{entry("id-a", []string{}, ptr.To[int32](math.MaxInt32))}},
		{name: "same entry unchanged", drivers: []storagev1.CSINodeDriver{entry("id-a", []string{"z", "k"}, ptr.To[int32](10)), other},
			ni:   nodeInfo{driver: "a", nodeID: "id-a", maxVolumes: 10, topology: topo},
			want: []storagev1.CSINodeDriver{entry("id-a", []string{"z", "k"}, ptr.To[int32](10)), other}},
		{name: "new node ID replaces the entry", drivers: []storagev1.CSINodeDriver{entry("old", nil, nil), other},
			ni: nodeInfo{driver: "a", nodeID: "id-a"}, wantChanged: true, want: []storagev1.CSINodeDriver{other, entry("id-a", []string{}, nil)}},
		{name: "new limit replaces the entry", drivers: []storagev1.CSINodeDriver{entry("id-a", []string{}, ptr.To[int32](5))},
			ni: nodeInfo{driver: "a", nodeID: "id-a", maxVolumes: 6}, wantChanged: true, want: []storagev1.CSINodeDriver{entry("id-a", []string{}, ptr.To[int32](6))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cn := &storagev1.CSINode{Spec: storagev1.CSINodeSpec{Drivers: c.drivers}}
			changed := installOnCSINode(cn, c.ni)
			if changed != c.wantChanged || !reflect.DeepEqual(cn.Spec.Drivers, c.want) {
				t.Errorf("changed %v drivers %+v; want %v %+v", changed, cn.Spec.Drivers, c.wantChanged, c.want)
			}
		})
	}
}

func TestUninstallFromCSINode(t *testing.T) {
	a, b := storagev1.CSINodeDriver{Name: "a"}, storagev1.CSINodeDriver{Name: "b"}
	orig := []storagev1.CSINodeDriver{a, b}
	cn := &storagev1.CSINode{Spec: storagev1.CSINodeSpec{Drivers: orig}}
	if !uninstallFromCSINode(cn, "a") || !reflect.DeepEqual(cn.Spec.Drivers, []storagev1.CSINodeDriver{b}) {
		t.Errorf("drivers = %+v", cn.Spec.Drivers)
	}
	if orig[0].Name != "a" {
		t.Errorf("the input slice was modified: %+v", orig)
	}
	if uninstallFromCSINode(cn, "a") {
		t.Error("removing an absent driver reported a change")
	}
}

func TestNodeMetaPatch(t *testing.T) {
	old := nodeWith(map[string]string{NodeIDAnnotation: `{"a":"1"}`, "keep": "k"}, map[string]string{"l": "v"})
	updated := old.DeepCopy()
	delete(updated.Annotations, NodeIDAnnotation)
	updated.Labels["t"] = "x"
	b, err := nodeMetaPatch(old, updated)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"metadata": map[string]any{
		"resourceVersion": "7",
		"annotations":     map[string]any{NodeIDAnnotation: nil},
		"labels":          map[string]any{"t": "x"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("patch = %s", b)
	}
}

// A write that loses a race is redone from a fresh read.
func TestAPIPublisherRetriesConflicts(t *testing.T) {
	client := fake.NewClientset(nodeWith(nil, nil))
	conflicts := map[string]int{}
	conflictOnce := func(verb, resource string) {
		client.PrependReactor(verb, resource, func(action k8stesting.Action) (bool, runtime.Object, error) {
			conflicts[verb+" "+resource]++
			if conflicts[verb+" "+resource] == 1 {
				return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: resource}, "n1", errors.New("changed"))
			}
			return false, nil, nil
		})
	}
	conflictOnce("patch", "nodes")
	conflictOnce("update", "csinodes")
	// The CSINode exists, so installing updates it.
	if _, err := client.StorageV1().CSINodes().Create(context.Background(), newCSINode(nodeWith(nil, nil)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := &apiPublisher{client: client, nodeName: "n1"}
	if err := p.install(context.Background(), nodeInfo{driver: "a", nodeID: "id-a"}); err != nil {
		t.Fatal(err)
	}
	if conflicts["patch nodes"] != 2 || conflicts["update csinodes"] != 2 {
		t.Errorf("writes = %v, want each tried twice", conflicts)
	}
	cn, _ := client.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
	n, _ := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if len(cn.Spec.Drivers) != 1 || n.Annotations[NodeIDAnnotation] != `{"a":"id-a"}` {
		t.Errorf("CSINode drivers %+v, annotations %v", cn.Spec.Drivers, n.Annotations)
	}
	if err := p.install(context.Background(), nodeInfo{driver: "b"}); err == nil || err.Error() != "error adding CSI driver node info: driverNodeID must not be empty" {
		t.Errorf("empty node ID: err = %v", err)
	}
}
