package eviction

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestParseThreshold: one evictionHard/evictionSoft value, as upstream reads the
// configuration file. The rows marked "was:" are inputs on which config, node and
// eviction each had their own parser and did not agree.
func TestParseThreshold(t *testing.T) {
	tests := []struct {
		name, signal, value string
		want                string // "signal<value"; "" with ok=false: disabled
		wantErr             string
	}{
		{name: "quantity", signal: "memory.available", value: "100Mi", want: "memory.available<100Mi"},
		{name: "decimal quantity", signal: "nodefs.inodesFree", value: "1e3", want: "nodefs.inodesFree<1e3"},
		{name: "percentage", signal: "nodefs.available", value: "10%", want: "nodefs.available<10%"},
		{name: "fractional percentage", signal: "imagefs.available", value: "7.5%", want: "imagefs.available<7.5%"},
		{name: "0% disables", signal: "memory.available", value: "0%"},
		{name: "100% disables", signal: "memory.available", value: "100%"},
		// Only the exact strings disable (upstream): 0.0% is a threshold nothing is below.
		{name: "0.0% is a threshold", signal: "memory.available", value: "0.0%", want: "memory.available<0%"},
		{name: "upper bound", signal: "memory.available", value: "99.9%", want: "memory.available<99.9%"},
		{name: "unknown signal", signal: "memory.free", value: "1Gi", wantErr: `unknown eviction signal "memory.free"`},
		{name: "empty", signal: "memory.available", value: "", wantErr: "invalid quantity"},
		{name: "not a quantity", signal: "memory.available", value: "lots", wantErr: "invalid quantity"},
		{name: "negative quantity", signal: "memory.available", value: "-1Gi", wantErr: "must be above zero"},
		{name: "not a percentage", signal: "memory.available", value: "ten%", wantErr: "invalid percentage"},
		{name: "NaN percentage", signal: "memory.available", value: "NaN%", wantErr: "invalid percentage"},
		{name: "negative percentage", signal: "memory.available", value: "-1%", wantErr: "within 0%-100%"},
		{name: "above 100%", signal: "memory.available", value: "101%", wantErr: "within 0%-100%"},
		// was: config, node and eviction all took a zero quantity; upstream refuses it.
		{name: "zero quantity", signal: "memory.available", value: "0", wantErr: "must be above zero"},
		// was: eviction took the flag form's operator in the file; config refused it.
		{name: "operator", signal: "memory.available", value: "<100Mi", wantErr: "invalid quantity"},
		{name: "operator before a percentage", signal: "nodefs.available", value: "<10%", wantErr: "invalid percentage"},
		{name: "other operator", signal: "memory.available", value: ">100Mi", wantErr: "invalid quantity"},
		{name: "operator with =", signal: "memory.available", value: "<=100Mi", wantErr: "invalid quantity"},
		// was: node and eviction trimmed spaces; config did not (upstream trims only the flag).
		{name: "leading space", signal: "memory.available", value: " 100Mi", wantErr: "invalid quantity"},
		{name: "trailing space", signal: "memory.available", value: "100Mi ", wantErr: "invalid quantity"},
		{name: "spaces around a percentage", signal: "nodefs.available", value: " 10% ", wantErr: "invalid quantity"},
		{name: "space before %", signal: "nodefs.available", value: "10 %", wantErr: "invalid percentage"},
		{name: "operator and space", signal: "memory.available", value: "< 100Mi", wantErr: "invalid quantity"},
		// was: node reserved all of capacity for 100% (eviction and config disabled it).
		{name: "100% reserves nothing", signal: "nodefs.available", value: "100%"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := ParseThreshold(tc.signal, tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseThreshold(%q, %q) = %v, %v, %v; want an error containing %q", tc.signal, tc.value, got, ok, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseThreshold(%q, %q): %v", tc.signal, tc.value, err)
			}
			if ok != (tc.want != "") {
				t.Fatalf("ParseThreshold(%q, %q) ok = %v, want %v", tc.signal, tc.value, ok, tc.want != "")
			}
			if s := string(got.Signal) + "<" + got.Value.String(); ok && (s != tc.want || got.Operator != OpLessThan) {
				t.Errorf("ParseThreshold(%q, %q) = %s (%s), want %s", tc.signal, tc.value, s, got.Operator, tc.want)
			}
		})
	}
}

func TestParseMinimumReclaim(t *testing.T) {
	tests := []struct {
		value, want, wantErr string
	}{
		{value: "500Mi", want: "500Mi"},
		{value: "0", want: "0"},
		{value: "5%", want: "5%"},
		{value: "150%", want: "150%"}, // upstream sets no upper bound
		{value: "0%", wantErr: "above 0%"},
		{value: "-1Mi", wantErr: "must not be negative"},
		{value: " 500Mi", wantErr: "invalid quantity"},
		{value: "<500Mi", wantErr: "invalid quantity"},
	}
	for _, tc := range tests {
		got, err := ParseMinimumReclaim("memory.available", tc.value)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseMinimumReclaim(%q) = %v, %v; want an error containing %q", tc.value, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("ParseMinimumReclaim(%q) = %v, %v; want %s", tc.value, got, err, tc.want)
		}
	}
	if _, err := ParseMinimumReclaim("bogus", "1Gi"); err == nil {
		t.Error("ParseMinimumReclaim of an unknown signal: no error")
	}
}

func TestParseGracePeriod(t *testing.T) {
	for value, wantErr := range map[string]string{"1m30s": "", "0s": "", "soon": "invalid duration", "-1s": "must not be negative", " 1m": "invalid duration"} {
		_, err := ParseGracePeriod("memory.available", value)
		if (err == nil) != (wantErr == "") || (err != nil && !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("ParseGracePeriod(%q) = %v, want error %q", value, err, wantErr)
		}
	}
}

// A percentage resolves as upstream's: float32 fraction times capacity, in bytes.
func TestThresholdValueResolve(t *testing.T) {
	th, _, err := ParseThreshold("nodefs.available", "10%")
	if err != nil {
		t.Fatal(err)
	}
	capacity := resource.MustParse("16Gi")
	got := th.Value.Resolve(&capacity)
	// float32(0.1) is a little above 0.1: 1717986944, not 1717986918.
	if got.Value() != 1717986944 {
		t.Errorf("10%% of 16Gi = %d, want 1717986944", got.Value())
	}
}
