package gc

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func ids(rs []ImageRecord) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.ID)
	}
	return strings.Join(s, ",")
}

func TestBytesToFree(t *testing.T) {
	tests := []struct {
		name                string
		capacity, available int64
		high, low           int
		want                int64
	}{
		{"below high", 1000, 200, 85, 80, 0},  // 80% used
		{"at high", 1000, 150, 85, 80, 50},    // 85% used: free to 80%
		{"above high", 1000, 50, 85, 80, 150}, // 95% used
		{"full", 1000, 0, 85, 80, 200},
		{"zero capacity", 0, 0, 85, 80, 0},
		{"available above capacity", 1000, 5000, 85, 80, 0},
		{"high 0 always collects", 1000, 900, 0, 0, 100}, // low 0: free to 100% available
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := BytesToFree(tc.capacity, tc.available, tc.high, tc.low); got != tc.want {
				t.Errorf("BytesToFree = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestValidateThresholds(t *testing.T) {
	tests := []struct {
		high, low int
		wantErr   string
	}{
		{85, 80, ""},
		{80, 85, "must be less than"},
		{80, 80, "must be less than"},
		{101, 80, "within 0-100"},
		{85, -1, "within 0-100"},
	}
	for _, tc := range tests {
		err := ValidateThresholds(tc.high, tc.low)
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("ValidateThresholds(%d, %d) = %v, want %q", tc.high, tc.low, err, tc.wantErr)
		}
	}
}

func TestSelectImagesToFree(t *testing.T) {
	old := t0.Add(-time.Hour)
	recs := []ImageRecord{
		{ID: "recent", Size: 100, FirstDetected: old, LastUsed: t0.Add(-time.Minute)},
		{ID: "lru", Size: 100, FirstDetected: old, LastUsed: t0.Add(-30 * time.Minute)},
		{ID: "never-used-later", Size: 100, FirstDetected: old.Add(time.Second)},
		{ID: "never-used", Size: 100, FirstDetected: old},
		{ID: "inuse", Size: 1000, FirstDetected: old, LastUsed: t0.Add(-50 * time.Minute), InUse: true},
		{ID: "pinned", Size: 1000, FirstDetected: old, Pinned: true},
		{ID: "young", Size: 1000, FirstDetected: t0.Add(-time.Minute)},
	}
	tests := []struct {
		name      string
		want      int64
		minAge    time.Duration
		victims   string
		wantFreed int64
	}{
		{"nothing wanted", 0, 2 * time.Minute, "", 0},
		{"LRU then first detected", 150, 2 * time.Minute, "never-used,never-used-later", 200},
		{"stops once enough", 100, 2 * time.Minute, "never-used", 100},
		{"all eligible, not enough", 10000, 2 * time.Minute, "never-used,never-used-later,lru,recent", 400},
		{"min age 0 lets young go", 10000, 0, "never-used,never-used-later,young,lru,recent", 1400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, freed := SelectImagesToFree(recs, t0, tc.minAge, tc.want)
			if ids(v) != tc.victims || freed != tc.wantFreed {
				t.Errorf("victims %s freed %d, want %s %d", ids(v), freed, tc.victims, tc.wantFreed)
			}
		})
	}
}

func TestSelectImagesUnusedFor(t *testing.T) {
	recs := []ImageRecord{
		{ID: "used-long-ago", FirstDetected: t0.Add(-10 * time.Hour), LastUsed: t0.Add(-2 * time.Hour)},
		{ID: "used-recently", FirstDetected: t0.Add(-10 * time.Hour), LastUsed: t0.Add(-30 * time.Minute)},
		{ID: "never-used-old", FirstDetected: t0.Add(-3 * time.Hour)},
		{ID: "never-used-new", FirstDetected: t0.Add(-10 * time.Minute)},
		{ID: "inuse", FirstDetected: t0.Add(-10 * time.Hour), LastUsed: t0.Add(-5 * time.Hour), InUse: true},
		{ID: "pinned", FirstDetected: t0.Add(-10 * time.Hour), Pinned: true},
	}
	if got := ids(SelectImagesUnusedFor(recs, t0, time.Hour)); got != "never-used-old,used-long-ago" {
		t.Errorf("max age 1h: %s", got)
	}
	if got := SelectImagesUnusedFor(recs, t0, 0); got != nil {
		t.Errorf("max age off: %v", got)
	}
}

func crec(id, pod, name string, ageMin int, running bool) ContainerRecord {
	return ContainerRecord{ID: id, SandboxID: "sb-" + pod, PodUID: pod, Name: name, CreatedAt: t0.Add(-time.Duration(ageMin) * time.Minute), Running: running}
}

func cids(cs []ContainerRecord) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.ID)
	}
	return strings.Join(s, ",")
}

func TestSelectContainersToRemove(t *testing.T) {
	base := []ContainerRecord{
		crec("a-run", "a", "app", 1, true),
		crec("a1", "a", "app", 10, false),
		crec("a2", "a", "app", 20, false),
		crec("a3", "a", "app", 30, false),
		crec("b1", "b", "app", 5, false),
		crec("b2", "b", "app", 50, false),
		crec("c1", "c", "side", 40, false),
	}
	tests := []struct {
		name    string
		in      []ContainerRecord
		policy  ContainerPolicy
		deleted map[string]bool
		want    string
	}{
		{"default keeps newest dead per container", base, DefaultContainerPolicy(), nil, "a2,a3,b2"},
		{"running never removed", []ContainerRecord{crec("r", "a", "app", 100, true)}, ContainerPolicy{MaxPerPodContainer: 0, MaxContainers: 0}, nil, ""},
		{"min age protects young", base, ContainerPolicy{MinAge: 15 * time.Minute, MaxPerPodContainer: 0, MaxContainers: -1}, nil, "a2,a3,b2,c1"},
		{"unlimited", base, ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: -1}, nil, ""},
		{"deleted pod loses all", base, ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: -1}, map[string]bool{"b": true}, "b1,b2"},
		{"max total spreads then oldest go", base, ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: 3}, nil, "a2,a3,b2"},
		{"max total below units: one each then oldest", base, ContainerPolicy{MaxPerPodContainer: -1, MaxContainers: 2}, nil, "a2,a3,b2,c1"},
		{"max total zero removes every dead", base, ContainerPolicy{MaxPerPodContainer: 5, MaxContainers: 0}, nil, "a2,a3,b2,b1,a1,c1"},
		{"max total wins over per container", base, ContainerPolicy{MaxPerPodContainer: 2, MaxContainers: 4}, nil, "a3,a2,b2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := cids(SelectContainersToRemove(tc.in, tc.policy, tc.deleted, t0)); got != tc.want {
				t.Errorf("removed %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSelectSandboxesToRemove(t *testing.T) {
	sb := func(id, pod string, ageMin int, ready bool) SandboxRecord {
		return SandboxRecord{ID: id, PodUID: pod, CreatedAt: t0.Add(-time.Duration(ageMin) * time.Minute), Ready: ready}
	}
	sandboxes := []SandboxRecord{
		sb("a-new", "a", 1, true), sb("a-old", "a", 10, false), sb("a-older", "a", 20, false),
		sb("b-only", "b", 5, false),
		sb("c-new", "c", 1, false), sb("c-old-with-ctr", "c", 9, false),
		sb("d-ready", "d", 30, true), sb("d-dead", "d", 3, false),
	}
	ctrs := []ContainerRecord{{ID: "x", SandboxID: "c-old-with-ctr"}}
	tests := []struct {
		name    string
		deleted map[string]bool
		want    string
	}{
		{"live pods keep newest, dead ones without containers go", nil, "a-old,a-older"},
		{"deleted pods lose every dead sandbox", map[string]bool{"b": true, "c": true, "d": true}, "a-old,a-older,b-only,c-new,d-dead"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range SelectSandboxesToRemove(sandboxes, ctrs, tc.deleted) {
				got = append(got, s.ID)
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("removed %v, want %s", got, tc.want)
			}
		})
	}
}
