// Package eventually is test support: the one polling helper of the unit tests
// (its name says when the condition must hold; package testutil would clash with
// prometheus's, which many of the same tests import). Only tests import it
// (cmd/nodelet checks the binary does not).
package eventually

import (
	"testing"
	"time"
)

// Timeout bounds True. It decides nothing: a condition that holds
// returns at once, and it is long enough for a loaded machine running -race.
const Timeout = 15 * time.Second

// pollInterval is how often True asks again.
const pollInterval = 5 * time.Millisecond

// True polls cond until it holds, and fails the test, naming what it waited
// for, if it does not within Timeout. It is for conditions another
// goroutine makes true soon; call it from the test's goroutine. A check that
// something does not happen needs a fake clock step or a barrier, not this.
func True(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll(t, Timeout, what, cond)
}

func poll(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(pollInterval)
	}
}
