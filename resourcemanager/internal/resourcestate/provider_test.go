package resourcestate

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
)

// fakeState is pod UID → container → CPU count.
type fakeState map[string]map[string]int

func (s fakeState) Containers(podUID string) []string { return Containers(s, podUID) }

// fakePolicy hints one hint per container of the state's pod and releases
// by deleting.
type fakePolicy struct{}

func (fakePolicy) TopologyHints(s fakeState, pod *v1.Pod, c *v1.Container) topologymanager.ProviderHints {
	return topologymanager.ProviderHints{c.Name: make([]topologymanager.Hint, len(s[string(pod.UID)]))}
}

func (fakePolicy) PodTopologyHints(s fakeState, pod *v1.Pod) topologymanager.ProviderHints {
	return topologymanager.ProviderHints{"pod": make([]topologymanager.Hint, len(s[string(pod.UID)]))}
}

func (fakePolicy) Release(s fakeState, podUID, container string) fakeState {
	out := fakeState{}
	for uid, cs := range s {
		out[uid] = maps.Clone(cs)
	}
	delete(out[podUID], container)
	return out
}

func TestProvider(t *testing.T) {
	pod := &v1.Pod{}
	pod.UID = "p"
	c := &v1.Container{Name: "a"}
	errWrite := errors.New("disk full")
	tests := []struct {
		name        string
		policy      Policy[fakeState]
		commitErr   error
		release     []string
		wantHints   int // hints per key, -1 for nil
		wantAlloc   []string
		wantAfter   []string // Allocated after Release
		wantCommits int
	}{
		{name: "policy none: no hints, nothing released", release: []string{"a"}, wantHints: -1, wantAlloc: []string{"a", "b"}, wantAfter: []string{"a", "b"}},
		{name: "static: hints, release commits", policy: fakePolicy{}, release: []string{"b"}, wantHints: 2, wantAlloc: []string{"a", "b"}, wantAfter: []string{"a"}, wantCommits: 1},
		{name: "static: releasing containers without assignments commits nothing", policy: fakePolicy{}, release: []string{"x"}, wantHints: 2, wantAlloc: []string{"a", "b"}, wantAfter: []string{"a", "b"}},
		{name: "static: a failed commit keeps the state", policy: fakePolicy{}, commitErr: errWrite, release: []string{"a", "b"}, wantHints: 2, wantAlloc: []string{"a", "b"}, wantAfter: []string{"a", "b"}, wantCommits: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			state := fakeState{"p": {"b": 1, "a": 2}, "q": {"c": 1}}
			commits := 0
			commit := func(s fakeState) error {
				if mu.TryLock() {
					mu.Unlock()
					t.Error("commit called without the lock held")
				}
				commits++
				if tt.commitErr != nil {
					return tt.commitErr
				}
				state = s
				return nil
			}
			p := NewProvider(&mu, &state, tt.policy, commit, "things")
			h, ph := p.GetTopologyHints(pod, c), p.GetPodTopologyHints(pod)
			if tt.wantHints < 0 {
				if h != nil || ph != nil {
					t.Errorf("hints = %v, %v; want nil", h, ph)
				}
			} else if len(h["a"]) != tt.wantHints || len(ph["pod"]) != tt.wantHints {
				t.Errorf("hints = %v, %v; want %d each", h, ph, tt.wantHints)
			}
			if got := p.Allocated(types.UID("p")); !reflect.DeepEqual(got, tt.wantAlloc) {
				t.Errorf("Allocated = %v, want %v", got, tt.wantAlloc)
			}
			p.Release(context.Background(), "p", tt.release)
			if got := p.Allocated(types.UID("p")); !reflect.DeepEqual(got, tt.wantAfter) {
				t.Errorf("Allocated after Release = %v, want %v", got, tt.wantAfter)
			}
			if commits != tt.wantCommits {
				t.Errorf("commits = %d, want %d", commits, tt.wantCommits)
			}
			if got := p.Allocated(types.UID("q")); !reflect.DeepEqual(got, []string{"c"}) {
				t.Errorf("other pod's Allocated = %v, want [c]", got)
			}
		})
	}
}
