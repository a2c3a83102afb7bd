package dbustest_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testsupport/dbustest"
	"github.com/nodelet/nodelet/nodeshutdown"
)

// The fakes driven by nodelet's own D-Bus client: the delay raised through the drop-in,
// the lock seen held and released, the signal delivered as logind's.
func TestFakesWithNodeletInhibitor(t *testing.T) {
	e := dbustest.Start(t, 5*time.Second)
	inh, err := nodeshutdown.NewInhibitor(nodeshutdown.InhibitorOptions{BusAddress: e.Addr(), DropInPath: e.DropIn, ReloadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer inh.Close()
	ctx := context.Background()

	c, err := inh.EnsureInhibitDelay(ctx, 24*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !c.OK() || c.Before != 5*time.Second || c.After != 24*time.Second || !c.WroteDropIn {
		t.Fatalf("EnsureInhibitDelay = %+v, want 5s raised to 24s", c)
	}
	if k := e.Systemd.KillUnits(); len(k) != 1 || k[0] != (dbustest.KillUnitCall{"systemd-logind.service", "all", 1}) {
		t.Errorf("KillUnit calls = %v, want one SIGHUP to systemd-logind.service", k)
	}

	if err := inh.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	ins := e.Logind.Inhibits()
	if len(ins) != 1 || strings.Join([]string{ins[0].What, ins[0].Mode}, "/") != "shutdown/delay" {
		t.Fatalf("Inhibit calls = %+v, want one shutdown delay lock", ins)
	}
	if !ins[0].HeldBy(os.Getpid()) {
		t.Fatal("HeldBy(this process) = false while the inhibitor holds the lock")
	}
	e.Logind.DropOwnCopies()
	select {
	case <-ins[0].Closed():
		t.Fatal("lock closed while held")
	case <-time.After(100 * time.Millisecond):
	}

	if err := e.Logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-inh.Events():
		if !v {
			t.Fatal("PrepareForShutdown(true) delivered as false")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PrepareForShutdown not delivered: the fake's signal was not taken as logind's")
	}

	inh.Release()
	select {
	case <-ins[0].Closed():
	case <-time.After(10 * time.Second):
		t.Fatal("lock not seen closed after Release")
	}
	if ins[0].ClosedAt().IsZero() || ins[0].HeldBy(os.Getpid()) {
		t.Errorf("after Release: ClosedAt %v, still held %v", ins[0].ClosedAt(), ins[0].HeldBy(os.Getpid()))
	}
}
