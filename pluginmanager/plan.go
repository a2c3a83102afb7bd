package pluginmanager

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// fileID tells a socket file from one re-created at the same path: a
// restarted plugin makes a new inode (and ctime), which upstream sees as a
// new fsnotify create event and answers by registering again. A file
// system may hand the freed inode number out again within one ctime tick,
// so the watcher also watches the connection to the registration server
// (sockState.gone).
type fileID struct {
	dev, ino uint64
	ctimeNs  int64
}

// sockState is what the watcher knows of one registration socket.
type sockState struct {
	id   fileID
	busy bool // a registration is running for it
	// pluginType and plugin are the plugin registered from it (Name "" if
	// none), deregistered through the handler of its type.
	pluginType string
	plugin     Plugin
	settled    bool // registered, or refused until the socket changes
	failures   int  // consecutive failed registrations, for the backoff
	retryAt    time.Time
	// gone: the registration server this socket's plugin registered
	// through closed its connection (set by the scan, not stored).
	gone bool
}

// actions are what one scan of the registration directory calls for.
type actions struct {
	// drop: sockets gone or re-created; their plugin (if any) deregisters.
	drop []string
	// register: new or re-created sockets, and failed ones due for a retry.
	register []string
}

// plan compares the sockets found in the directory with the known ones.
// A socket with a registration running is left alone until it ends, so a
// socket removed meanwhile is dropped on a later scan.
func plan(found map[string]fileID, known map[string]sockState, now time.Time) actions {
	var a actions
	for path, st := range known {
		if st.busy {
			continue
		}
		if id, ok := found[path]; !ok || id != st.id || st.gone {
			a.drop = append(a.drop, path)
		}
	}
	for path, id := range found {
		st, ok := known[path]
		switch {
		case !ok:
			a.register = append(a.register, path)
		case st.busy:
		case st.id != id || st.gone:
			a.register = append(a.register, path)
		case !st.settled && !now.Before(st.retryAt):
			a.register = append(a.register, path)
		}
	}
	sort.Strings(a.drop)
	sort.Strings(a.register)
	return a
}

// Retry delays after failed registrations, as upstream's operation backoff.
const (
	initialRetryDelay = 500 * time.Millisecond
	maxRetryDelay     = 2*time.Minute + 2*time.Second
)

// retryDelay is the wait after the n-th consecutive failure (n >= 1).
func retryDelay(n int) time.Duration {
	d := initialRetryDelay
	for i := 1; i < n && d < maxRetryDelay; i++ {
		d *= 2
	}
	return min(d, maxRetryDelay)
}

// noHandler is the refusal of a plugin of a type no handler takes, in
// upstream's wording plus the types nodelet takes, so the plugin is told
// why instead of waiting.
func noHandler(pluginType, socket string, handled []string) error {
	return fmt.Errorf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s (%s plugins are not supported by nodelet, only %s)",
		pluginType, socket, pluginType, strings.Join(handled, ", "))
}
