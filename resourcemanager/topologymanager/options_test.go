package topologymanager

import (
	"strings"
	"testing"
)

func TestParseOptions(t *testing.T) {
	all := Gates{PolicyOptions: true, BetaOptions: true}
	tests := []struct {
		name    string
		in      map[string]string
		gates   Gates
		want    Options
		wantErr string
	}{
		{"defaults", nil, all, Options{MaxAllowableNUMANodes: 8}, ""},
		{"prefer closest", map[string]string{"prefer-closest-numa-nodes": "true"}, all, Options{PreferClosestNUMA: true, MaxAllowableNUMANodes: 8}, ""},
		{"more NUMA nodes allowed", map[string]string{"max-allowable-numa-nodes": "16"}, all, Options{MaxAllowableNUMANodes: 16}, ""},
		{"fewer than the default", map[string]string{"max-allowable-numa-nodes": "4"}, all, Options{}, `the minimum value of "max-allowable-numa-nodes" should not be less than 8`},
		{"not a number", map[string]string{"max-allowable-numa-nodes": "many"}, all, Options{}, "unable to convert policy option to integer"},
		{"not a bool", map[string]string{"prefer-closest-numa-nodes": "maybe"}, all, Options{}, `bad value for option "prefer-closest-numa-nodes"`},
		{"unknown", map[string]string{"align-by-socket": "true"}, all, Options{}, `unknown Topology Manager Policy option: "align-by-socket"`},
		{"options gate off", map[string]string{"prefer-closest-numa-nodes": "true"}, Gates{}, Options{}, "requires feature gate TopologyManagerPolicyOptions"},
		{"GA options need no beta gate", map[string]string{"prefer-closest-numa-nodes": "true"}, Gates{PolicyOptions: true}, Options{PreferClosestNUMA: true, MaxAllowableNUMANodes: 8}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseOptions(tt.in, tt.gates)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseOptions = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
