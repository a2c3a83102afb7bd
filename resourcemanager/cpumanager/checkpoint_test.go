package cpumanager

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

func TestCheckpointRoundTripAndShape(t *testing.T) {
	path := filepath.Join(t.TempDir(), CheckpointFile)
	s := State{DefaultCPUSet: mustParse(t, "0,2-3"), Assignments: map[string]map[string]cpuset.CPUSet{
		"pod-uid": {"app": mustParse(t, "1")},
	}}
	if err := writeCheckpoint(path, PolicyStatic, s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Upstream's field names and string cpusets.
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["policyName"] != "static" || raw["defaultCpuSet"] != "0,2-3" || raw["checksum"] == nil {
		t.Errorf("checkpoint %s lacks upstream's fields", b)
	}
	if e := raw["entries"].(map[string]any)["pod-uid"].(map[string]any)["app"]; e != "1" {
		t.Errorf("entry %v, want \"1\"", e)
	}
	got, ok, err := readCheckpoint(path, PolicyStatic)
	if err != nil || !ok {
		t.Fatalf("read: %v %v", ok, err)
	}
	if !got.DefaultCPUSet.Equals(s.DefaultCPUSet) || !got.Assignments["pod-uid"]["app"].Equals(mustParse(t, "1")) {
		t.Errorf("round trip: got %+v", got)
	}
}

func TestReadCheckpoint(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := readCheckpoint(filepath.Join(dir, "absent"), PolicyStatic); ok || err != nil {
		t.Errorf("absent file: ok=%v err=%v, want a fresh start", ok, err)
	}
	path := filepath.Join(dir, CheckpointFile)
	if err := writeCheckpoint(path, PolicyNone, State{DefaultCPUSet: cpuset.New()}); err != nil {
		t.Fatal(err)
	}
	_, _, err := readCheckpoint(path, PolicyStatic)
	if !errors.Is(err, errPolicyMismatch) || !strings.Contains(err.Error(), `configured policy "static" differs from state checkpoint policy "none"`) {
		t.Errorf("policy mismatch: got %v", err)
	}
	b, _ := os.ReadFile(path)
	// The data string is what v1.37 verifies (dataChecksum).
	tampered := strings.Replace(string(b), `\"defaultCpuSet\":\"\"`, `\"defaultCpuSet\":\"0-1\"`, 1)
	if tampered == string(b) {
		t.Fatalf("no defaultCpuSet in the data of %s", b)
	}
	if err := os.WriteFile(path, []byte(tampered), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readCheckpoint(path, PolicyNone); err == nil || !strings.Contains(err.Error(), "corrupted") {
		t.Errorf("tampered checkpoint: got %v", err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readCheckpoint(path, PolicyNone); err == nil {
		t.Error("bad JSON must fail")
	}
}
