package pleg

import (
	"context"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// PodStatus is what the runtime says about one pod at Timestamp. Values handed
// out by the Cache are shared: treat them as read-only.
type PodStatus struct {
	UID       types.UID
	Name      string
	Namespace string
	// Sandboxes are newest first (by CreatedAt).
	Sandboxes []*runtimeapi.PodSandboxStatus
	// Containers are all of the pod's containers, exited ones included, newest first.
	Containers []*runtimeapi.ContainerStatus
	// IPs are the primary and additional IPs of the newest sandbox when it is
	// ready. When the pod has no ready sandbox, the previous IPs are kept so a
	// terminated pod still reports the IP it had.
	IPs []string
	// Timestamp is when this status was taken.
	Timestamp time.Time
}

type cacheEntry struct {
	status   *PodStatus
	err      error
	modified time.Time
}

type subscriber struct {
	uid     types.UID
	minTime time.Time
	ch      chan cacheEntry // buffered(1); receives exactly once
}

// Cache holds the latest PodStatus per pod and lets callers wait for a status
// newer than a point in time. It is safe for concurrent use.
type Cache struct {
	clock clock.PassiveClock

	mu        sync.Mutex
	pods      map[types.UID]cacheEntry
	timestamp time.Time // every entry is at least this fresh
	subs      map[types.UID][]*subscriber
}

// NewCache returns an empty cache. clk stamps Set calls made with a zero time.
func NewCache(clk clock.PassiveClock) *Cache {
	return &Cache{clock: clk, pods: map[types.UID]cacheEntry{}, subs: map[types.UID][]*subscriber{}}
}

func emptyStatus(uid types.UID) *PodStatus { return &PodStatus{UID: uid} }

// getLocked returns the entry for uid, with an empty status if none is known.
func (c *Cache) getLocked(uid types.UID) cacheEntry {
	e, ok := c.pods[uid]
	if !ok {
		return cacheEntry{status: emptyStatus(uid)}
	}
	if e.status == nil {
		e.status = emptyStatus(uid)
	}
	return e
}

// Get returns the cached status of uid (never nil: an empty PodStatus with the
// UID when unknown) and the error of the inspection that produced it.
func (c *Cache) Get(uid types.UID) (*PodStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.getLocked(uid)
	return e.status, e.err
}

// modified returns the cached status of uid with the time it was taken (zero
// when none is cached).
func (c *Cache) modified(uid types.UID) (*PodStatus, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.getLocked(uid)
	return e.status, e.modified
}

func (c *Cache) newerLocked(uid types.UID, t time.Time) bool {
	e, ok := c.pods[uid]
	return (ok && e.modified.After(t)) || c.timestamp.After(t)
}

// GetNewerThan blocks until the pod's status or the cache's global timestamp is
// newer than t, then returns the status as Get would; or until ctx is done.
func (c *Cache) GetNewerThan(ctx context.Context, uid types.UID, t time.Time) (*PodStatus, error) {
	c.mu.Lock()
	if c.newerLocked(uid, t) {
		e := c.getLocked(uid)
		c.mu.Unlock()
		return e.status, e.err
	}
	s := &subscriber{uid: uid, minTime: t, ch: make(chan cacheEntry, 1)}
	c.subs[uid] = append(c.subs[uid], s)
	c.mu.Unlock()

	select {
	case e := <-s.ch:
		return e.status, e.err
	case <-ctx.Done():
		c.mu.Lock()
		c.removeSubLocked(s)
		c.mu.Unlock()
		// The entry may have been delivered while we were giving up; prefer it.
		select {
		case e := <-s.ch:
			return e.status, e.err
		default:
		}
		return emptyStatus(uid), ctx.Err()
	}
}

func (c *Cache) removeSubLocked(s *subscriber) {
	list := c.subs[s.uid]
	for i, x := range list {
		if x == s {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.subs, s.uid)
	} else {
		c.subs[s.uid] = list
	}
}

// notifyLocked wakes uid's subscribers whose wait is over.
func (c *Cache) notifyLocked(uid types.UID) {
	list := c.subs[uid]
	if len(list) == 0 {
		return
	}
	kept := list[:0]
	for _, s := range list {
		if c.newerLocked(uid, s.minTime) {
			s.ch <- c.getLocked(uid)
			continue
		}
		kept = append(kept, s)
	}
	if len(kept) == 0 {
		delete(c.subs, uid)
	} else {
		c.subs[uid] = kept
	}
}

// Set records the status (and inspection error) of uid as of ts (zero ts means
// now). An update older than what is cached is ignored, so a slow inspection
// cannot overwrite a fresher one.
func (c *Cache) Set(uid types.UID, s *PodStatus, err error, ts time.Time) {
	if ts.IsZero() {
		ts = c.clock.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.pods[uid]; ok && ts.Before(old.modified) {
		return
	}
	c.pods[uid] = cacheEntry{status: s, err: err, modified: ts}
	c.notifyLocked(uid)
}

// Delete forgets uid.
func (c *Cache) Delete(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, uid)
}

// UpdateTime declares every cached status fresh as of ts (the relist found no
// other change) and wakes waiters that this satisfies.
func (c *Cache) UpdateTime(ts time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts.Before(c.timestamp) {
		return
	}
	c.timestamp = ts
	for uid := range c.subs {
		c.notifyLocked(uid)
	}
}
