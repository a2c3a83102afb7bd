package hostsetup

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The chains upstream's kubelet keeps with makeIPTablesUtilChains (1.37; the
// KUBE-MARK-* and KUBE-POSTROUTING chains, and with them iptablesMasqueradeBit
// and iptablesDropBit, went to kube-proxy).
const (
	// iptablesHintChain tells other components (kube-proxy, CNI plugins) whether
	// the host uses iptables-legacy or iptables-nft: the mode in which it exists.
	iptablesHintChain = "KUBE-IPTABLES-HINT"
	// iptablesFirewallChain holds the rule that drops non-local packets to
	// 127.0.0.0/8 (the route_localnet hole, kubernetes#90259).
	iptablesFirewallChain = "KUBE-FIREWALL"
	// iptablesCanaryChain is created in mangle, nat and filter; when a firewall
	// reload flushes it, the chains above are put back.
	iptablesCanaryChain = "KUBE-KUBELET-CANARY"
	// iptablesMonitorInterval is how often the canary is checked, as upstream.
	iptablesMonitorInterval = time.Minute
)

// iptablesRunner runs one iptables binary (iptables or ip6tables).
type iptablesRunner interface {
	Run(ctx context.Context, args ...string) ([]byte, error)
}

// execIPTables runs the binary at path.
type execIPTables struct{ path string }

func (e execIPTables) Run(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, e.path, args...).CombinedOutput()
}

// exitCode is the exit status in err, or -1 when the command did not run.
func exitCode(err error) int {
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return -1
}

// iptablesRule is one rule kept in place: prepended (the jumps, so they come
// before anything else) or appended.
type iptablesRule struct {
	table, chain string
	prepend      bool
	args         []string
}

// iptablesChains is what upstream's kubelet keeps for one IP family: the hint
// chain in both; the firewall chain, its rule and the jumps to it for IPv4 only
// (IPv6 has no route_localnet).
func iptablesChains(ipv6 bool) (chains [][2]string, rules []iptablesRule) {
	chains = [][2]string{{"mangle", iptablesHintChain}}
	if ipv6 {
		return chains, nil
	}
	chains = append(chains, [2]string{"filter", iptablesFirewallChain})
	rules = []iptablesRule{
		{table: "filter", chain: "OUTPUT", prepend: true, args: []string{"-j", iptablesFirewallChain}},
		{table: "filter", chain: "INPUT", prepend: true, args: []string{"-j", iptablesFirewallChain}},
		{table: "filter", chain: iptablesFirewallChain, args: []string{
			"-m", "comment", "--comment", "block incoming localnet connections",
			"--dst", "127.0.0.0/8", "!", "--src", "127.0.0.0/8",
			"-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT",
			"-j", "DROP"}},
	}
	return chains, rules
}

// iptablesFamily keeps the chains of one IP family in place.
type iptablesFamily struct {
	name string // "IPv4" or "IPv6"
	ipv6 bool
	run  iptablesRunner
}

// ensureChain creates chain in table; exit status 1 means it exists.
func (f iptablesFamily) ensureChain(ctx context.Context, table, chain string) error {
	out, err := f.run.Run(ctx, "-w", "5", "-t", table, "-N", chain)
	if err != nil && exitCode(err) != 1 {
		return fmt.Errorf("creating chain %s in table %s: %w: %s", chain, table, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ensureRule adds r unless an identical rule is there (-C).
func (f iptablesFamily) ensureRule(ctx context.Context, r iptablesRule) error {
	check := append([]string{"-w", "5", "-t", r.table, "-C", r.chain}, r.args...)
	out, err := f.run.Run(ctx, check...)
	if err == nil {
		return nil
	}
	if exitCode(err) != 1 {
		return fmt.Errorf("checking a rule in chain %s of table %s: %w: %s", r.chain, r.table, err, strings.TrimSpace(string(out)))
	}
	op := "-A"
	if r.prepend {
		op = "-I"
	}
	add := append([]string{"-w", "5", "-t", r.table, op, r.chain}, r.args...)
	if out, err := f.run.Run(ctx, add...); err != nil {
		return fmt.Errorf("adding a rule to chain %s of table %s: %w: %s", r.chain, r.table, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sync puts the chains, rules and canaries in place.
func (f iptablesFamily) sync(ctx context.Context) error {
	chains, rules := iptablesChains(f.ipv6)
	for _, c := range chains {
		if err := f.ensureChain(ctx, c[0], c[1]); err != nil {
			return err
		}
	}
	for _, r := range rules {
		if err := f.ensureRule(ctx, r); err != nil {
			return err
		}
	}
	for _, table := range []string{"mangle", "nat", "filter"} {
		if err := f.ensureChain(ctx, table, iptablesCanaryChain); err != nil {
			return err
		}
	}
	return nil
}

// canaryGone says whether a firewall reload removed the canary from any table.
func (f iptablesFamily) canaryGone(ctx context.Context) bool {
	for _, table := range []string{"mangle", "nat", "filter"} {
		if _, err := f.run.Run(ctx, "-w", "5", "-t", table, "-S", iptablesCanaryChain); err != nil {
			return true
		}
	}
	return false
}

// IPTablesUtil is makeIPTablesUtilChains: the families whose binary exists.
type IPTablesUtil struct {
	families []iptablesFamily
	clk      clock.Clock
}

// newIPTablesUtil finds iptables and ip6tables with lookPath. A missing binary
// is logged and that family skipped, as upstream goes on without the chains.
func newIPTablesUtil(ctx context.Context, lookPath func(string) (string, error), clk clock.Clock) *IPTablesUtil {
	u := &IPTablesUtil{clk: clk}
	for _, fam := range []struct {
		name, bin string
		ipv6      bool
	}{{"IPv4", "iptables", false}, {"IPv6", "ip6tables", true}} {
		path, err := lookPath(fam.bin)
		if err != nil {
			klog.FromContext(ctx).Info("Not creating the iptables util chains (makeIPTablesUtilChains): the binary is not installed; some functionality may be missing",
				"protocol", fam.name, "binary", fam.bin, "err", err)
			continue
		}
		u.families = append(u.families, iptablesFamily{name: fam.name, ipv6: fam.ipv6, run: execIPTables{path: path}})
	}
	return u
}

// syncAll puts every family's chains in place and returns those that succeeded;
// a failing family is logged and left alone, as upstream.
func (u *IPTablesUtil) syncAll(ctx context.Context) []iptablesFamily {
	logger := klog.FromContext(ctx)
	var ok []iptablesFamily
	for _, f := range u.families {
		if err := f.sync(ctx); err != nil {
			logger.Error(err, "Failed to initialize iptables rules; some functionality may be missing.", "protocol", f.name)
			continue
		}
		logger.Info("Initialized iptables rules.", "protocol", f.name)
		ok = append(ok, f)
	}
	return ok
}

// Run syncs the chains, then every minute puts them back if the canary went.
func (u *IPTablesUtil) Run(ctx context.Context) {
	watched := u.syncAll(ctx)
	if len(watched) == 0 {
		return
	}
	for {
		t := u.clk.NewTimer(iptablesMonitorInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			u.resyncIfFlushed(ctx, watched)
		}
	}
}

// resyncIfFlushed puts back the chains of the families whose canary is gone.
func (u *IPTablesUtil) resyncIfFlushed(ctx context.Context, families []iptablesFamily) {
	for _, f := range families {
		if !f.canaryGone(ctx) {
			continue
		}
		klog.FromContext(ctx).Info("iptables canary chain is gone (a firewall reload?); restoring the kubelet's chains", "protocol", f.name)
		if err := f.sync(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to restore the iptables rules", "protocol", f.name)
		}
	}
}

// NewIPTablesUtil is makeIPTablesUtilChains on this host's binaries; nil when
// it is false.
func NewIPTablesUtil(ctx context.Context, makeChains bool, clk clock.Clock) *IPTablesUtil {
	if !makeChains {
		return nil
	}
	return newIPTablesUtil(ctx, exec.LookPath, clk)
}
