package prober

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Update is a changed probe result of one container.
type Update struct {
	ContainerID string
	Result      Result
	PodUID      types.UID
}

// results caches the latest result per container ID for one probe type, and
// reports changes on a buffered channel (the sync loop reads it).
type results struct {
	mu      sync.RWMutex
	byID    map[string]Result
	updates chan Update
}

func newResults() *results {
	// Large enough that 110 pods' readiness flipping at once does not block workers.
	return &results{byID: map[string]Result{}, updates: make(chan Update, 1000)}
}

func (r *results) get(id string) (Result, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	res, ok := r.byID[id]
	return res, ok
}

// set stores res and reports it if it changed; it gives up reporting when ctx ends.
func (r *results) set(ctx context.Context, id string, res Result, uid types.UID) {
	r.mu.Lock()
	prev, ok := r.byID[id]
	r.byID[id] = res
	r.mu.Unlock()
	if !ok || prev != res {
		select {
		case r.updates <- Update{ContainerID: id, Result: res, PodUID: uid}:
		case <-ctx.Done():
		}
	}
}

// setIfAbsent stores res for id, without reporting it, unless id has a
// result already; it says whether it stored it.
func (r *results) setIfAbsent(id string, res Result) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[id]; ok {
		return false
	}
	r.byID[id] = res
	return true
}

func (r *results) remove(id string) {
	r.mu.Lock()
	delete(r.byID, id)
	r.mu.Unlock()
}
