package devicemanager

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestDecide(t *testing.T) {
	four := []string{"d3", "d1", "d2", "d0"}
	for _, tc := range []struct {
		name      string
		need      Need
		preferred []string
		want      []string
		wantPref  bool
		wantErr   string
	}{
		{name: "nothing asked", need: Need{Resource: "r", Registered: true, Healthy: four}},
		{name: "lowest free ids first", need: Need{Resource: "r", Count: 2, Registered: true, Healthy: four},
			want: []string{"d0", "d1"}, wantPref: true},
		{name: "in use skipped", need: Need{Resource: "r", Count: 2, Registered: true, Healthy: four, InUse: []string{"d0", "d2"}},
			want: []string{"d1", "d3"}},
		{name: "unhealthy never given", need: Need{Resource: "r", Count: 2, Registered: true, Healthy: []string{"d2"}},
			wantErr: "requested number of devices unavailable for r. Requested: 2, Available: 1"},
		{name: "all in use", need: Need{Resource: "r", Count: 1, Registered: true, Healthy: four, InUse: four},
			wantErr: "requested number of devices unavailable for r. Requested: 1, Available: 0"},
		{name: "unregistered", need: Need{Resource: "r", Count: 1},
			wantErr: "can't allocate unregistered device r"},
		{name: "registered without devices", need: Need{Resource: "r", Count: 1, Registered: true},
			wantErr: "requested number of devices unavailable for r. Requested: 1, Available: 0"},
		{name: "already assigned is kept", need: Need{Resource: "r", Count: 2, Registered: true, Healthy: four, Assigned: []string{"d3", "d2"}, InUse: []string{"d3", "d2"}}},
		{name: "already assigned, plugin gone: still kept", need: Need{Resource: "r", Count: 1, Assigned: []string{"d3"}}},
		{name: "changed request", need: Need{Resource: "r", Count: 1, Registered: true, Assigned: []string{"d3", "d2"}},
			wantErr: `container changed request for resource "r" from 2 to 1`},
		{name: "init container devices reused first", need: Need{Resource: "r", Count: 1, Registered: true, Healthy: four, InUse: []string{"d2"}, Reusable: []string{"d2"}},
			want: []string{"d2"}},
		{name: "reuse then free", need: Need{Resource: "r", Count: 3, Registered: true, Healthy: four, InUse: []string{"d2", "d0"}, Reusable: []string{"d2"}},
			want: []string{"d2", "d1", "d3"}},
		{name: "preferred within free", need: Need{Resource: "r", Count: 2, Registered: true, Healthy: four},
			preferred: []string{"d3", "d2"}, want: []string{"d3", "d2"}, wantPref: true},
		{name: "preferred unknown or taken ignored", need: Need{Resource: "r", Count: 2, Registered: true, Healthy: four, InUse: []string{"d1"}},
			preferred: []string{"x", "d1", "d3"}, want: []string{"d3", "d0"}, wantPref: true},
		{name: "no choice, no preference", need: Need{Resource: "r", Count: 2, Registered: true, Healthy: []string{"b", "a"}},
			want: []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Decide(tc.need)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.NeedsPreference() != tc.wantPref {
				t.Errorf("NeedsPreference %v, want %v", p.NeedsPreference(), tc.wantPref)
			}
			got := Complete(p, tc.preferred)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextReusable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reusable []string
		got      []string
		kind     ContainerKind
		want     []string
	}{
		{"init adds", []string{"a"}, []string{"b"}, InitContainer, []string{"a", "b"}},
		{"init reusing keeps", []string{"a"}, []string{"a"}, InitContainer, []string{"a"}},
		{"sidecar takes", []string{"a", "b"}, []string{"a"}, SidecarContainer, []string{"b"}},
		{"app takes", []string{"a", "b"}, []string{"b", "c"}, AppContainer, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, NextReusable(tc.reusable, tc.got, tc.kind), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
