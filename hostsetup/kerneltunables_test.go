package hostsetup

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// protectKernelDefaults: true refuses to start when a tunable upstream checks
// differs (naming each, in upstream's words) and changes nothing; false sets
// them. A tunable that cannot be read stops the start either way, as upstream.
func TestProtectKernelDefaults(t *testing.T) {
	upstream := map[string]int{
		"vm/overcommit_memory":      1,
		"vm/panic_on_oom":           0,
		"kernel/panic":              10,
		"kernel/panic_on_oops":      1,
		"kernel/keys/root_maxkeys":  1000000,
		"kernel/keys/root_maxbytes": 25000000,
	}
	// A stock kernel's values: every one differs.
	stock := map[string]int{
		"vm/overcommit_memory":      0,
		"vm/panic_on_oom":           1,
		"kernel/panic":              0,
		"kernel/panic_on_oops":      0,
		"kernel/keys/root_maxkeys":  200,
		"kernel/keys/root_maxbytes": 20000,
	}
	write := tempProcSys
	read := func(t *testing.T, root string) map[string]int {
		out := map[string]int{}
		for name := range upstream {
			data, err := os.ReadFile(filepath.Join(root, name))
			if err != nil {
				continue
			}
			v, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			out[name] = v
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		start   map[string]int
		missing string
		protect bool
		want    map[string]int // the files afterwards
		errHas  []string
	}{
		{name: "already upstream's, protected", start: upstream, protect: true, want: upstream},
		{name: "already upstream's, not protected", start: upstream, want: upstream},
		{name: "stock kernel, not protected: set", start: stock, want: upstream},
		{name: "stock kernel, protected: refused, untouched", start: stock, protect: true, want: stock, errHas: []string{
			"protectKernelDefaults",
			"invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0",
			"invalid kernel flag: vm/panic_on_oom, expected value: 0, actual value: 1",
			"invalid kernel flag: kernel/panic, expected value: 10, actual value: 0",
			"invalid kernel flag: kernel/panic_on_oops, expected value: 1, actual value: 0",
			"invalid kernel flag: kernel/keys/root_maxkeys, expected value: 1000000, actual value: 200",
			"invalid kernel flag: kernel/keys/root_maxbytes, expected value: 25000000, actual value: 20000",
		}},
		{name: "one differs, protected: only it is named", start: map[string]int{
			"vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 0, "kernel/panic_on_oops": 1,
			"kernel/keys/root_maxkeys": 1000000, "kernel/keys/root_maxbytes": 25000000,
		}, protect: true, errHas: []string{"invalid kernel flag: kernel/panic, expected value: 10, actual value: 0"}},
		{name: "unreadable flag stops the start", start: upstream, missing: "kernel/keys/root_maxkeys",
			errHas: []string{"reading kernel flag kernel/keys/root_maxkeys"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := write(t, tc.start, tc.missing)
			err := SetUpKernelTunables(context.Background(), root, tc.protect)
			if len(tc.errHas) == 0 && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(tc.errHas) > 0 {
				if err == nil {
					t.Fatal("no error")
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if strings.Count(err.Error(), "invalid kernel flag") > len(tc.errHas) {
					t.Errorf("error names more flags than differ: %v", err)
				}
			}
			if tc.want != nil {
				got := read(t, root)
				for name, v := range tc.want {
					if got[name] != v {
						t.Errorf("%s = %d afterwards, want %d", name, got[name], v)
					}
				}
			}
		})
	}
}

// tempProcSys writes vals (tunable name → value) as a /proc/sys tree in a temp dir,
// leaving out skip.
func tempProcSys(t *testing.T, vals map[string]int, skip string) string {
	t.Helper()
	root := t.TempDir()
	for name, v := range vals {
		if name == skip {
			continue
		}
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
