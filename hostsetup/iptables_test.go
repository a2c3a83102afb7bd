package hostsetup

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

type exitErr int

func (e exitErr) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitErr) ExitCode() int { return int(e) }

// fakeIPTables keeps tables of chains of rules, enough of iptables for -N, -C,
// -A, -I and -S.
type fakeIPTables struct {
	mu     sync.Mutex
	tables map[string]map[string][]string
	calls  int
}

func newFakeIPTables() *fakeIPTables {
	return &fakeIPTables{tables: map[string]map[string][]string{
		"filter": {"INPUT": {"-j ACCEPT-FROM-ADMIN"}, "OUTPUT": nil, "FORWARD": nil},
		"nat":    {"PREROUTING": nil, "INPUT": nil, "OUTPUT": nil, "POSTROUTING": nil},
		"mangle": {"PREROUTING": nil, "INPUT": nil, "FORWARD": nil, "OUTPUT": nil, "POSTROUTING": nil},
	}}
}

func (f *fakeIPTables) Run(_ context.Context, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(args) < 6 || args[0] != "-w" || args[2] != "-t" {
		return nil, fmt.Errorf("unexpected arguments %q", args)
	}
	table, op, chain, rule := args[3], args[4], args[5], strings.Join(args[6:], " ")
	chains := f.tables[table]
	rules, exists := chains[chain]
	switch op {
	case "-N":
		if exists {
			return []byte("iptables: Chain already exists."), exitErr(1)
		}
		chains[chain] = nil
	case "-S":
		if !exists {
			return []byte("iptables: No chain/target/match by that name."), exitErr(1)
		}
	case "-C":
		if !exists || !slices.Contains(rules, rule) {
			return nil, exitErr(1)
		}
	case "-A", "-I":
		if !exists {
			return []byte("iptables: No chain/target/match by that name."), exitErr(1)
		}
		if op == "-A" {
			chains[chain] = append(rules, rule)
		} else {
			chains[chain] = append([]string{rule}, rules...)
		}
	default:
		return nil, fmt.Errorf("unexpected operation %q", op)
	}
	return nil, nil
}

// reload is a firewall reload: every chain but the built-in ones goes, and the
// built-in ones are emptied.
func (f *fakeIPTables) reload() {
	f.mu.Lock()
	defer f.mu.Unlock()
	fresh := newFakeIPTables()
	f.tables = fresh.tables
}

func (f *fakeIPTables) chain(table, chain string) ([]string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.tables[table][chain]
	return slices.Clone(r), ok
}

const localnetRule = "-m comment --comment block incoming localnet connections --dst 127.0.0.0/8 ! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"

func checkIPv4Chains(t *testing.T, f *fakeIPTables) {
	t.Helper()
	if _, ok := f.chain("mangle", "KUBE-IPTABLES-HINT"); !ok {
		t.Error("no KUBE-IPTABLES-HINT in mangle")
	}
	if r, ok := f.chain("filter", "KUBE-FIREWALL"); !ok || !slices.Equal(r, []string{localnetRule}) {
		t.Errorf("filter KUBE-FIREWALL = %q (exists %v), want the localnet drop rule only", r, ok)
	}
	for _, c := range []string{"INPUT", "OUTPUT"} {
		if r, _ := f.chain("filter", c); len(r) == 0 || r[0] != "-j KUBE-FIREWALL" || slices.Index(r[1:], "-j KUBE-FIREWALL") >= 0 {
			t.Errorf("filter %s = %q, want one jump to KUBE-FIREWALL, first", c, r)
		}
	}
	for _, table := range []string{"mangle", "nat", "filter"} {
		if _, ok := f.chain(table, "KUBE-KUBELET-CANARY"); !ok {
			t.Errorf("no KUBE-KUBELET-CANARY in %s", table)
		}
	}
}

// makeIPTablesUtilChains: upstream 1.37's chains for iptables (the hint chain,
// KUBE-FIREWALL with the localnet drop rule jumped to first from INPUT and
// OUTPUT) and ip6tables (the hint chain only), idempotent, restored when a
// firewall reload removes the canary; a missing binary is logged and skipped.
func TestIPTablesUtilChains(t *testing.T) {
	ctx := context.Background()
	v4, v6 := newFakeIPTables(), newFakeIPTables()
	u := &IPTablesUtil{clk: clocktesting.NewFakeClock(time.Now()), families: []iptablesFamily{
		{name: "IPv4", run: v4}, {name: "IPv6", ipv6: true, run: v6},
	}}
	if got := u.syncAll(ctx); len(got) != 2 {
		t.Fatalf("%d families initialised, want 2", len(got))
	}
	checkIPv4Chains(t, v4)
	if _, ok := v6.chain("mangle", "KUBE-IPTABLES-HINT"); !ok {
		t.Error("no KUBE-IPTABLES-HINT in ip6tables mangle")
	}
	if _, ok := v6.chain("filter", "KUBE-FIREWALL"); ok {
		t.Error("KUBE-FIREWALL created for IPv6; upstream keeps it IPv4 only")
	}
	if r, _ := v4.chain("filter", "INPUT"); !slices.Equal(r, []string{"-j KUBE-FIREWALL", "-j ACCEPT-FROM-ADMIN"}) {
		t.Errorf("filter INPUT = %q, want the jump prepended to the admin's rule", r)
	}

	t.Run("idempotent", func(t *testing.T) {
		u.syncAll(ctx)
		checkIPv4Chains(t, v4)
	})

	t.Run("canary present: nothing to do", func(t *testing.T) {
		before := v4.calls
		u.resyncIfFlushed(ctx, u.families[:1])
		if got := v4.calls - before; got != 3 {
			t.Errorf("%d iptables calls with the canary present, want 3 (one -S per table)", got)
		}
	})

	t.Run("restored after a firewall reload, on the monitor's tick", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		fresh := newFakeIPTables()
		mu := &IPTablesUtil{clk: clk, families: []iptablesFamily{{name: "IPv4", run: fresh}}}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); mu.Run(runCtx) }()
		defer func() { cancel(); <-done }()
		waitFor(t, clk.HasWaiters, "the monitor to wait for its tick")
		checkIPv4Chains(t, fresh)
		fresh.reload()
		if _, ok := fresh.chain("filter", "KUBE-FIREWALL"); ok {
			t.Fatal("reload left KUBE-FIREWALL")
		}
		clk.Step(iptablesMonitorInterval)
		waitFor(t, func() bool { _, ok := fresh.chain("filter", "KUBE-FIREWALL"); return ok && clk.HasWaiters() }, "the chains to come back")
		checkIPv4Chains(t, fresh)
	})

	t.Run("iptables missing: logged, skipped", func(t *testing.T) {
		lookPath := func(bin string) (string, error) {
			if bin == "ip6tables" {
				return "/usr/sbin/ip6tables", nil
			}
			return "", &exec.Error{Name: bin, Err: exec.ErrNotFound}
		}
		mu := newIPTablesUtil(ctx, lookPath, clocktesting.NewFakeClock(time.Now()))
		if len(mu.families) != 1 || !mu.families[0].ipv6 {
			t.Fatalf("families %+v, want ip6tables only", mu.families)
		}
		none := newIPTablesUtil(ctx, func(bin string) (string, error) { return "", errors.New("not found") }, clocktesting.NewFakeClock(time.Now()))
		runCtx, cancel := context.WithCancel(ctx)
		cancel()
		none.Run(runCtx) // returns at once: nothing to do
	})

	t.Run("a failing family is left alone, the other kept", func(t *testing.T) {
		broken := &failingIPTables{}
		mu := &IPTablesUtil{families: []iptablesFamily{{name: "IPv4", run: broken}, {name: "IPv6", ipv6: true, run: newFakeIPTables()}}}
		got := mu.syncAll(ctx)
		if len(got) != 1 || got[0].name != "IPv6" {
			t.Fatalf("initialised %+v, want IPv6 only", got)
		}
	})
}

type failingIPTables struct{}

func (failingIPTables) Run(context.Context, ...string) ([]byte, error) {
	return []byte("can't initialize iptables table `mangle': Permission denied"), exitErr(3)
}

// waitFor waits for cond, failing the test after 10s (a deadline for a hang,
// not a speed requirement).
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
