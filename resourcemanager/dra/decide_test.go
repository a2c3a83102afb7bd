package dra

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"
)

func testPod(claims ...v1.PodResourceClaim) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "pod-uid"},
		Spec:       v1.PodSpec{ResourceClaims: claims},
	}
}

func TestPodClaims(t *testing.T) {
	direct := v1.PodResourceClaim{Name: "a", ResourceClaimName: ptr.To("claim-a")}
	tmpl := v1.PodResourceClaim{Name: "b", ResourceClaimTemplateName: ptr.To("tmpl")}
	for _, c := range []struct {
		name     string
		pod      *v1.Pod
		want     []podClaim
		wantErr  error
		wantText string
	}{
		{name: "none", pod: testPod()},
		{name: "direct name", pod: testPod(direct), want: []podClaim{{name: "a", claimName: "claim-a"}}},
		{name: "template with its status", pod: func() *v1.Pod {
			p := testPod(direct, tmpl)
			p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "b", ResourceClaimName: ptr.To("p-b-xyz")}}
			return p
		}(), want: []podClaim{{name: "a", claimName: "claim-a"}, {name: "b", claimName: "p-b-xyz", mustCheckOwner: true}}},
		{name: "template without status waits", pod: testPod(direct, tmpl),
			wantErr: resourceclaim.ErrClaimNotFound, wantText: `pod "ns/p": ResourceClaim not created yet`},
		{name: "template whose status names no claim needs none", pod: func() *v1.Pod {
			p := testPod(tmpl)
			p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "b"}}
			return p
		}()},
		{name: "neither field", pod: testPod(v1.PodResourceClaim{Name: "c"}), wantErr: resourceclaim.ErrAPIUnsupported},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := podClaims(c.pod)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.wantText) {
					t.Fatalf("err = %v, want %v containing %q", err, c.wantErr, c.wantText)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("podClaims = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func allocatedClaim(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-a", UID: "claim-uid"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-uid"}},
		},
	}
}

func TestCheckClaim(t *testing.T) {
	pod := testPod()
	for _, c := range []struct {
		name    string
		pc      podClaim
		claim   func(*resourceapi.ResourceClaim)
		wantErr string
	}{
		{name: "allocated and reserved", pc: podClaim{claimName: "claim-a"}},
		{name: "not reserved for the pod", pc: podClaim{claimName: "claim-a"},
			claim:   func(c *resourceapi.ResourceClaim) { c.Status.ReservedFor[0].UID = "other" },
			wantErr: "pod p (pod-uid) is not allowed to use ResourceClaim claim-a (claim-uid)"},
		{name: "reserved but not allocated", pc: podClaim{claimName: "claim-a"},
			claim:   func(c *resourceapi.ResourceClaim) { c.Status.Allocation = nil },
			wantErr: "ResourceClaim claim-a: not allocated"},
		{name: "template claim not owned by the pod", pc: podClaim{claimName: "claim-a", mustCheckOwner: true},
			wantErr: "ResourceClaim ns/claim-a was not created for Pod ns/p (Pod is not owner)"},
		{name: "template claim owned by the pod", pc: podClaim{claimName: "claim-a", mustCheckOwner: true},
			claim: func(c *resourceapi.ResourceClaim) {
				c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "pod-uid", Controller: ptr.To(true)}}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			claim := allocatedClaim()
			if c.claim != nil {
				c.claim(claim)
			}
			err := checkClaim(pod, c.pc, claim)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || err.Error() != c.wantErr) {
				t.Fatalf("checkClaim = %v, want %q", err, c.wantErr)
			}
		})
	}
}

func TestNewClaimStateDriversAndSkips(t *testing.T) {
	prep, unprep, all := resourceapi.SkipNodeOperationNodePrepareResources, resourceapi.SkipNodeOperationNodeUnprepareResources, resourceapi.SkipNodeOperationAll
	r := func(driver string, skips ...resourceapi.SkipNodeOperation) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: driver, Pool: "p", Device: "d", SkipNodeOperations: skips}
	}
	for _, c := range []struct {
		name                 string
		results              []resourceapi.DeviceRequestAllocationResult
		wantPrep, wantUnprep []string
	}{
		{name: "one driver", results: []resourceapi.DeviceRequestAllocationResult{r("a"), r("a")}, wantPrep: []string{"a"}, wantUnprep: []string{"a"}},
		{name: "two drivers, sorted", results: []resourceapi.DeviceRequestAllocationResult{r("b"), r("a")}, wantPrep: []string{"a", "b"}, wantUnprep: []string{"a", "b"}},
		{name: "all results skip prepare", results: []resourceapi.DeviceRequestAllocationResult{r("a", prep), r("a", all)}, wantUnprep: []string{"a"}},
		{name: "one result of two skips: both calls made", results: []resourceapi.DeviceRequestAllocationResult{r("a", all), r("a")}, wantPrep: []string{"a"}, wantUnprep: []string{"a"}},
		{name: "skip all", results: []resourceapi.DeviceRequestAllocationResult{r("a", all), r("b", unprep)}, wantPrep: []string{"b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newClaimState(allocatedClaim(c.results...))
			if s.ClaimUID != "claim-uid" || s.ClaimName != "claim-a" || s.Namespace != "ns" || s.PodUIDs == nil {
				t.Fatalf("state = %+v", s)
			}
			if got := driversFor(s, prep); !reflect.DeepEqual(got, c.wantPrep) {
				t.Errorf("prepare drivers = %v, want %v", got, c.wantPrep)
			}
			if got := driversFor(s, unprep); !reflect.DeepEqual(got, c.wantUnprep) {
				t.Errorf("unprepare drivers = %v, want %v", got, c.wantUnprep)
			}
		})
	}
}

func TestContainerCDIDevices(t *testing.T) {
	prepared := map[string]ClaimState{
		"claim-a": {DriverState: map[string]DriverState{
			"b.example.com": {Devices: []Device{{RequestNames: []string{"gpu"}, CDIDeviceIDs: []string{"b.example.com/gpu=1"}}}},
			"a.example.com": {Devices: []Device{
				{RequestNames: []string{"gpu"}, CDIDeviceIDs: []string{"a.example.com/gpu=0"}},
				{RequestNames: []string{"nic"}, CDIDeviceIDs: []string{"a.example.com/nic=0", "a.example.com/nic=0-extra"}},
				{CDIDeviceIDs: []string{"a.example.com/shared=x"}}, // no request names: serves every request
			}},
		}},
		"p-t-xyz": {DriverState: map[string]DriverState{"a.example.com": {Devices: []Device{{CDIDeviceIDs: []string{"a.example.com/t=0"}}}}}},
	}
	lookup := func(n string) (ClaimState, bool) { s, ok := prepared[n]; return s, ok }
	pod := testPod(v1.PodResourceClaim{Name: "a", ResourceClaimName: ptr.To("claim-a")},
		v1.PodResourceClaim{Name: "t", ResourceClaimTemplateName: ptr.To("tmpl")},
		v1.PodResourceClaim{Name: "missing", ResourceClaimName: ptr.To("not-prepared")})
	pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "t", ResourceClaimName: ptr.To("p-t-xyz")}}
	for _, c := range []struct {
		name    string
		claims  []v1.ResourceClaim
		want    []string
		wantErr string
	}{
		{name: "no claims"},
		{name: "whole claim, drivers in name order", claims: []v1.ResourceClaim{{Name: "a"}},
			want: []string{"a.example.com/gpu=0", "a.example.com/nic=0", "a.example.com/nic=0-extra", "a.example.com/shared=x", "b.example.com/gpu=1"}},
		{name: "one request", claims: []v1.ResourceClaim{{Name: "a", Request: "nic"}},
			want: []string{"a.example.com/nic=0", "a.example.com/nic=0-extra", "a.example.com/shared=x"}},
		{name: "template claim", claims: []v1.ResourceClaim{{Name: "t"}}, want: []string{"a.example.com/t=0"}},
		{name: "claim not prepared", claims: []v1.ResourceClaim{{Name: "missing"}},
			wantErr: "internal error: unable to get claim info for ResourceClaim not-prepared in namespace ns"},
		{name: "claim not in the pod", claims: []v1.ResourceClaim{{Name: "nope"}},
			wantErr: `container main references resource claim "nope", which is not in the pod's spec.resourceClaims`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctr := &v1.Container{Name: "main", Resources: v1.ResourceRequirements{Claims: c.claims}}
			got, err := containerCDIDevices(pod, ctr, lookup)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("CDI devices = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestDecideUnprepare(t *testing.T) {
	pods := func(uids ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, u := range uids {
			m[u] = struct{}{}
		}
		return m
	}
	state := map[string]ClaimState{
		"only-mine":   {PodUIDs: pods("me")},
		"shared":      {PodUIDs: pods("me", "other")},
		"not-mine":    {PodUIDs: pods("other")},
		"nobody-left": {PodUIDs: pods()},
	}
	lookup := func(n string) (ClaimState, bool) { s, ok := state[n]; return s, ok }
	for _, c := range []struct {
		name   string
		claims []string
		want   unprepareDecision
	}{
		{name: "nothing", want: unprepareDecision{}},
		{name: "only this pod: unprepare", claims: []string{"only-mine"}, want: unprepareDecision{unprepare: []string{"only-mine"}}},
		{name: "shared: detach only", claims: []string{"shared"}, want: unprepareDecision{detach: []string{"shared"}}},
		{name: "another pod's claim is left alone", claims: []string{"not-mine", "nobody-left"}, want: unprepareDecision{}},
		{name: "unknown claim", claims: []string{"gone"}, want: unprepareDecision{}},
		{name: "repeated names once", claims: []string{"only-mine", "shared", "only-mine"},
			want: unprepareDecision{unprepare: []string{"only-mine"}, detach: []string{"shared"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := decideUnprepare(types.UID("me"), c.claims, lookup); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("decideUnprepare = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestValidatePlugin(t *testing.T) {
	for _, c := range []struct {
		name, driver, endpoint string
		versions               []string
		wantErr                string
	}{
		{name: "v1", driver: "d", endpoint: "/p/d.sock", versions: []string{"v1beta1.DRAPlugin", "v1.DRAPlugin"}},
		{name: "unix URL", driver: "d", endpoint: "unix:///p/d.sock", versions: []string{"v1.DRAPlugin"}},
		{name: "v1beta1 only", driver: "d", endpoint: "/p/d.sock", versions: []string{"v1beta1.DRAPlugin"},
			wantErr: `invalid supported gRPC versions of DRA driver plugin d at endpoint /p/d.sock: none of services supported by the plugin (["v1beta1.DRAPlugin"]) are supported by the kubelet (["v1.DRAPlugin"])`},
		{name: "no versions", driver: "d", endpoint: "/p/d.sock",
			wantErr: "invalid supported gRPC versions of DRA driver plugin d at endpoint /p/d.sock: empty list of supported gRPC services (aka supported versions)"},
		{name: "no name", endpoint: "/p/d.sock", versions: []string{"v1.DRAPlugin"}, wantErr: "DRA driver name is empty"},
		{name: "relative endpoint", driver: "d", endpoint: "d.sock", versions: []string{"v1.DRAPlugin"},
			wantErr: `endpoint "d.sock" of DRA driver plugin d is not the absolute path of a unix socket`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := validatePlugin(c.driver, c.endpoint, c.versions)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || err.Error() != c.wantErr) {
				t.Fatalf("validatePlugin = %v, want %q", err, c.wantErr)
			}
		})
	}
}

func TestCheckResults(t *testing.T) {
	claims := []*drapb.Claim{{Uid: "u1", Name: "a"}, {Uid: "u2", Name: "b"}}
	for _, c := range []struct {
		name    string
		errs    map[string]string
		wantErr string
	}{
		{name: "all answered", errs: map[string]string{"u1": "", "u2": ""}},
		{name: "one failed", errs: map[string]string{"u1": "", "u2": "busy"}, wantErr: "NodePrepareResources failed for ResourceClaim b: busy"},
		{name: "unknown claim", errs: map[string]string{"u1": "", "u2": "", "u3": ""}, wantErr: "NodePrepareResources returned result for unknown claim UID u3"},
		{name: "one skipped", errs: map[string]string{"u1": ""}, wantErr: "NodePrepareResources skipped 1 ResourceClaims"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkResults("NodePrepareResources", claims, c.errs)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || err.Error() != c.wantErr) {
				t.Fatalf("checkResults = %v, want %q", err, c.wantErr)
			}
		})
	}
}
