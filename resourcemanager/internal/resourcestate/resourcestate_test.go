package resourcestate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var errBad = errors.New("bad checkpoint")

func TestRestore(t *testing.T) {
	tests := []struct {
		name         string
		read         func() (string, bool, error)
		assigns      bool
		validate     error
		want         string
		wantRestored bool
		wantErr      string
		wantAside    bool
	}{
		{name: "restored", read: func() (string, bool, error) { return "cp", true, nil }, assigns: true, want: "cp", wantRestored: true},
		{name: "no checkpoint, static: initial", read: func() (string, bool, error) { return "", false, nil }, assigns: true, want: "initial"},
		{name: "no checkpoint, none: empty", read: func() (string, bool, error) { return "", false, nil }, want: "empty"},
		{name: "corrupt under none: set aside, empty", read: func() (string, bool, error) { return "", false, fmt.Errorf("x: %w", errBad) }, want: "empty", wantAside: true},
		{name: "corrupt under static: refused", read: func() (string, bool, error) { return "", false, fmt.Errorf("x: %w", errBad) }, assigns: true, wantErr: "please drain this node and delete the test manager checkpoint file"},
		{name: "not this machine's: refused", read: func() (string, bool, error) { return "cp", true, nil }, assigns: true, validate: errors.New("cpus differ"), wantErr: "could not restore state from checkpoint: cpus differ"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := Restore[string]{What: "test manager", Path: path, Read: tt.read, Corrupt: errBad, Assigns: tt.assigns,
				Validate: func(string) error { return tt.validate },
				Initial:  func() string { return "initial" }, Empty: func() string { return "empty" }}
			got, restored, err := r.Run(time.Now())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || restored != tt.wantRestored {
				t.Fatalf("Run = %q, %v, %v; want %q, %v", got, restored, err, tt.want, tt.wantRestored)
			}
			if _, err := os.Stat(path); tt.wantAside != os.IsNotExist(err) {
				t.Errorf("checkpoint set aside = %v, want %v", os.IsNotExist(err), tt.wantAside)
			}
		})
	}
}

func TestContainers(t *testing.T) {
	a := map[string]map[string]int{"p": {"b": 1, "a": 2}}
	if got := Containers(a, "p"); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("Containers = %v", got)
	}
	if got := Containers(a, "q"); len(got) != 0 {
		t.Errorf("unknown pod: %v", got)
	}
}
