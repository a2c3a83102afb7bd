//go:build vm

// Package vm boots a small VM (qemu, Debian's kernel, systemd as PID 1, cgroup v2, a swap
// disk) that runs containerd and nodelet, and checks the cgroup files of every QoS class and
// the per-container swap limits for LimitedSwap and NoSwap. See README.md. Run as root:
//
//	go test -tags vm -v -count=1 -timeout 15m ./test/vm/...
package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

const (
	mi       = int64(1) << 20
	nodeName = "nodelet-vm"
	pageSize = 4096
)

// pod is what the test's pods (guest/manifests, guest/api-pods) ask for, and so what their
// cgroups must say.
type pod struct {
	qos         string // guaranteed, burstable, besteffort
	cpuReqMilli int64
	cpuMax      string // cpu.max of the container and the pod
	memMax      string // memory.max of the container and the pod
	memReq      int64
	// swap: LimitedSwap gives this container swap (non-critical Burstable, request < limit,
	// not a static pod).
	swap bool
}

var pods = map[string]pod{
	"burstable-swap":   {qos: "burstable", cpuReqMilli: 100, cpuMax: "20000 100000", memMax: "134217728", memReq: 64 * mi, swap: true},
	"burstable-eq":     {qos: "burstable", cpuReqMilli: 100, cpuMax: "max 100000", memMax: "67108864", memReq: 64 * mi},
	"guaranteed":       {qos: "guaranteed", cpuReqMilli: 100, cpuMax: "10000 100000", memMax: "67108864", memReq: 64 * mi},
	"besteffort":       {qos: "besteffort", cpuMax: "max 100000", memMax: "max"},
	"critical":         {qos: "burstable", cpuReqMilli: 100, cpuMax: "20000 100000", memMax: "134217728", memReq: 64 * mi},
	"static-burstable": {qos: "burstable", cpuReqMilli: 100, cpuMax: "20000 100000", memMax: "134217728", memReq: 64 * mi},
}

// results is out/results.txt as written by guest/scenario.sh.
type results struct {
	lines     []string
	memTotal  int64
	swapTotal int64
	mode      string
	ok        bool
	errors    []string
	failExit  int
	failMsg   string
	// mismatchExit and mismatchMsg: nodelet (cgroupfs) against a containerd with SystemdCgroup.
	mismatchExit int
	mismatchMsg  string
	// realSystemdExit is the exit code of the cgroups package's TestRealSystemd in the guest.
	realSystemdExit int
	// cg[scenario][kind+" "+name][file] = value
	cg map[string]map[string]map[string]string
	// cri[scenario][pod/container] = memory.swap.max nodelet sent over CRI
	cri map[string]map[string]string
	// path[scenario][pod/container] = cgroup path of the container
	path map[string]map[string]string
	tree map[string][]string
	// fill[scenario] = {dd exit, memory.swap.current, new OOM kills} of the swap fill.
	fill map[string][3]int64
}

func parseResults(data string) (*results, error) {
	r := &results{failExit: -1, realSystemdExit: -1, mismatchExit: -1, cg: map[string]map[string]map[string]string{}, cri: map[string]map[string]string{},
		path: map[string]map[string]string{}, tree: map[string][]string{}, fill: map[string][3]int64{}}
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		r.lines = append(r.lines, line)
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var err error
		switch f[0] {
		case "ok":
			r.ok = true
		case "error":
			r.errors = append(r.errors, line)
		case "mode":
			r.mode = f[1]
		case "meminfo":
			var v int64
			v, err = strconv.ParseInt(f[2], 10, 64)
			if f[1] == "MemTotal" {
				r.memTotal = v
			} else {
				r.swapTotal = v
			}
		case "failswapon":
			if f[1] == "exit" {
				r.failExit, err = strconv.Atoi(f[2])
			} else {
				r.failMsg = strings.Join(f[2:], " ")
			}
		case "mismatch":
			if f[1] == "exit" {
				r.mismatchExit, err = strconv.Atoi(f[2])
			} else {
				r.mismatchMsg = strings.Join(f[2:], " ")
			}
		case "swapfill": // swapfill SC exit N swapcurrent N oomkill N
			if len(f) != 8 {
				return nil, fmt.Errorf("short line %q", line)
			}
			var v [3]int64
			for i, j := range []int{3, 5, 7} {
				if v[i], err = strconv.ParseInt(f[j], 10, 64); err != nil {
					break
				}
			}
			r.fill[f[1]] = v
		case "realsystemd":
			r.realSystemdExit, err = strconv.Atoi(f[2])
		case "tree":
			r.tree[f[1]] = append(r.tree[f[1]], f[2])
		case "cg":
			if len(f) < 6 {
				return nil, fmt.Errorf("short line %q", line)
			}
			if r.cg[f[1]] == nil {
				r.cg[f[1]] = map[string]map[string]string{}
			}
			k := f[2] + " " + baseName(f[3])
			if r.cg[f[1]][k] == nil {
				r.cg[f[1]][k] = map[string]string{}
			}
			r.cg[f[1]][k][f[4]] = strings.Join(f[5:], " ")
		case "cri":
			if r.cri[f[1]] == nil {
				r.cri[f[1]] = map[string]string{}
			}
			r.cri[f[1]][baseName(f[2])] = f[4]
		case "container":
			if r.path[f[1]] == nil {
				r.path[f[1]] = map[string]string{}
			}
			r.path[f[1]][baseName(f[2])] = f[3]
		}
		if err != nil {
			return nil, fmt.Errorf("parsing %q: %w", line, err)
		}
	}
	return r, sc.Err()
}

// baseName strips the node name static pods carry: static-burstable-nodelet-vm/main ->
// static-burstable/main.
func baseName(s string) string {
	pod, rest, found := strings.Cut(s, "/")
	pod = strings.TrimSuffix(pod, "-"+nodeName)
	if found {
		return pod + "/" + rest
	}
	return pod
}

// limitedSwap is the upstream LimitedSwap formula: int64(request / MemTotal * SwapTotal).
func limitedSwap(memReq, memTotal, swapTotal int64) int64 {
	return int64(float64(memReq) / float64(memTotal) * float64(swapTotal))
}

// shares is MilliCPUToShares: 1024 per cpu, at least 2.
func shares(milli int64) uint64 {
	s := milli * 1024 / 1000
	if s < 2 {
		s = 2
	}
	return uint64(s)
}

// runcWeight is runc 1.1's (Debian 12's) linear cpu.shares -> cpu.weight conversion.
func runcWeight(shares uint64) uint64 { return 1 + ((shares-2)*9999)/262142 }

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestVMCgroupV2Swap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (qemu, a kernel cache, containerd in the guest)")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: run test/vm/install-deps.sh")
	}
	vmDir := env("VM_DIR", "/var/lib/nodelet-vm")
	vmTimeout, err := strconv.Atoi(env("VM_TIMEOUT", "480"))
	if err != nil {
		t.Fatalf("VM_TIMEOUT: %v", err)
	}
	smp, err := strconv.Atoi(env("VM_SMP", "2"))
	if err != nil {
		t.Fatalf("VM_SMP: %v", err)
	}

	// run.sh bounds qemu itself (killed after VM_TIMEOUT); this bounds the builds around it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(vmTimeout+300)*time.Second)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", "run.sh")
	cmd.Env = append(os.Environ(), "VM_DIR="+vmDir, "VM_TIMEOUT="+strconv.Itoa(vmTimeout), "VM_SMP="+strconv.Itoa(smp))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On timeout: SIGTERM to the whole group (run.sh stops its apiserver, timeout(1) stops
	// qemu), SIGKILL 20s later.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	runErr := cmd.Run()
	t.Logf("run.sh took %s", time.Since(start).Round(time.Second))
	out := filepath.Join(vmDir, "out")
	for _, f := range []string{"host-timings.txt", "wall-timings.txt", "guest-timings.txt"} {
		if b, err := os.ReadFile(filepath.Join(out, f)); err == nil {
			t.Logf("%s:\n%s", f, b)
		}
	}
	if report, err := os.ReadFile(filepath.Join(out, "report.txt")); err == nil {
		t.Logf("guest report (%s):\n%s", filepath.Join(out, "report.txt"), report)
	}
	if runErr != nil {
		var ee *exec.ExitError
		if errors.As(runErr, &ee) || ctx.Err() != nil {
			t.Fatalf("run.sh: %v (ctx: %v); console log: %s", runErr, ctx.Err(), filepath.Join(out, "console.log"))
		}
		t.Fatalf("run.sh: %v", runErr)
	}
	data, err := os.ReadFile(filepath.Join(out, "results.txt"))
	if err != nil {
		t.Fatalf("the guest reported nothing: %v", err)
	}
	r, err := parseResults(string(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.errors {
		t.Errorf("guest: %s", e)
	}
	if !r.ok {
		t.Fatalf("the guest did not finish its scenarios; see %s/logs and console.log", out)
	}
	checkResults(t, r, smp)
	for _, scen := range scenarios {
		checkSummarySwap(t, scen.name, filepath.Join(out, "summary-"+scen.name+".json"), r.swapTotal)
	}
}

// checkSummarySwap reads the /stats/summary the guest saved for a scenario: the node's swap
// (used + available = SwapTotal) and each pod's swap from its cgroup v2 memory.swap.current.
func checkSummarySwap(t *testing.T, sc, path string, swapTotal int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: /stats/summary: %v", sc, err)
		return
	}
	var s statsapi.Summary
	if err := json.Unmarshal(data, &s); err != nil {
		t.Errorf("%s: /stats/summary: %v", sc, err)
		return
	}
	sw := s.Node.Swap
	if sw == nil || sw.SwapUsageBytes == nil || sw.SwapAvailableBytes == nil {
		t.Errorf("%s: summary node swap = %+v, want used and available", sc, sw)
	} else if got := int64(*sw.SwapUsageBytes + *sw.SwapAvailableBytes); got != swapTotal {
		t.Errorf("%s: summary node swap used %d + available %d = %d, want SwapTotal %d", sc, *sw.SwapUsageBytes, *sw.SwapAvailableBytes, got, swapTotal)
	}
	seen := 0
	for _, ps := range s.Pods {
		if _, ok := pods[baseName(ps.PodRef.Name)]; !ok {
			continue
		}
		seen++
		if ps.Swap == nil || ps.Swap.SwapUsageBytes == nil {
			t.Errorf("%s: summary pod %s swap = %+v, want the pod cgroup's memory.swap.current", sc, ps.PodRef.Name, ps.Swap)
		}
	}
	if seen != len(pods) {
		t.Errorf("%s: summary has %d of the %d pods", sc, seen, len(pods))
	}
	if sw != nil && sw.SwapUsageBytes != nil {
		t.Logf("%s: /stats/summary node swap: used %d, available %d", sc, *sw.SwapUsageBytes, *sw.SwapAvailableBytes)
	}
}

// scenarios are the guest's pod scenarios (guest/scenario.sh) and what each must show.
var scenarios = []struct {
	name        string
	driver      string // nodelet's cgroupDriver (containerd's SystemdCgroup matches)
	limitedSwap bool   // memorySwap.swapBehavior LimitedSwap (else NoSwap)
}{
	{"limitedswap", "cgroupfs", true},
	{"noswap", "cgroupfs", false},
	{"systemd", "systemd", true},
}

// qosPath names the QoS cgroups (as scenario.sh keys them) and where pod cgroups sit, per driver.
type qosPath struct {
	kubepods, burstable, besteffort string
	podPrefix                       map[string]string // QoS class -> container path prefix
}

var qosPaths = map[string]qosPath{
	"cgroupfs": {"kubepods", "kubepods/burstable", "kubepods/besteffort", map[string]string{
		"guaranteed": "/kubepods/pod", "burstable": "/kubepods/burstable/pod", "besteffort": "/kubepods/besteffort/pod"}},
	"systemd": {"kubepods.slice", "kubepods.slice/kubepods-burstable.slice", "kubepods.slice/kubepods-besteffort.slice", map[string]string{
		"guaranteed": "/kubepods.slice/kubepods-pod",
		"burstable":  "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod",
		"besteffort": "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"}},
}

func checkResults(t *testing.T, r *results, smp int) {
	t.Helper()
	if r.memTotal <= 0 || r.swapTotal <= 0 {
		t.Fatalf("MemTotal %d, SwapTotal %d: want both > 0 (swap on)", r.memTotal, r.swapTotal)
	}
	t.Logf("guest: MemTotal %d, SwapTotal %d; pods from %s", r.memTotal, r.swapTotal, r.mode)

	if r.failExit <= 0 {
		t.Errorf("failSwapOn (default true) with swap on: nodelet exited %d, want non-zero", r.failExit)
	}
	if !strings.Contains(r.failMsg, "swap") || !strings.Contains(r.failMsg, "failSwapOn: false") {
		t.Errorf("failSwapOn message %q: want it to say swap is on and how to allow it (failSwapOn: false)", r.failMsg)
	}

	if r.mismatchExit <= 0 {
		t.Errorf("cgroupDriver cgroupfs against containerd with SystemdCgroup = true: nodelet exited %d, want non-zero", r.mismatchExit)
	}
	// The message is a klog line: its quotes are escaped.
	msg := strings.ReplaceAll(r.mismatchMsg, `\"`, `"`)
	for _, w := range []string{`configured with cgroupDriver "cgroupfs"`, `runtime uses "systemd"`, "SystemdCgroup = false"} {
		if !strings.Contains(msg, w) {
			t.Errorf("driver mismatch message %q: want it to name %s", r.mismatchMsg, w)
		}
	}
	if r.realSystemdExit != 0 {
		t.Errorf("TestRealSystemd (the systemd driver against the guest's systemd) exited %d; see out/logs/realsystemd.log", r.realSystemdExit)
	}

	for _, scen := range scenarios {
		sc := scen.name
		q := qosPaths[scen.driver]
		cg := r.cg[sc]
		if cg == nil {
			t.Errorf("%s: no results", sc)
			continue
		}
		// kubepods: all of the node's memory and cpu (no kube/system reserved in the config).
		want := map[string]string{
			"memory.max": strconv.FormatInt(r.memTotal, 10),
			"cpu.weight": strconv.FormatUint(occgroups.ConvertCPUSharesToCgroupV2Value(uint64(1024*smp)), 10),
			"cpu.max":    "max 100000",
			"pids.max":   "max",
		}
		checkFiles(t, sc, "qos "+q.kubepods, cg["qos "+q.kubepods], want)
		checkFiles(t, sc, "qos "+q.besteffort, cg["qos "+q.besteffort], map[string]string{
			"cpu.weight": "1", "memory.max": "max"})
		// burstable: upstream sets its cpu.weight from the summed cpu requests of the Burstable
		// pods (UpdateQOSCgroups).
		var burstMilli int64
		for name := range r.path[sc] {
			if p, ok := pods[strings.Split(name, "/")[0]]; ok && p.qos == "burstable" {
				burstMilli += p.cpuReqMilli
			}
		}
		checkFiles(t, sc, "qos "+q.burstable, cg["qos "+q.burstable], map[string]string{
			"memory.max": "max",
			"cpu.weight": strconv.FormatUint(occgroups.ConvertCPUSharesToCgroupV2Value(shares(burstMilli)), 10),
		})

		// 136 MiB into a container limited to 128 MiB of memory: with ~16.7 MiB of swap the
		// excess is swapped out; with none the cgroup OOM-kills.
		fill, ok := r.fill[sc]
		switch {
		case !ok:
			t.Errorf("%s: no swap fill result", sc)
		case scen.limitedSwap && (fill[0] != 0 || fill[1] <= 0 || fill[2] != 0):
			t.Errorf("%s: swap fill: dd exit %d, memory.swap.current %d, OOM kills %d; want 0, > 0, 0", sc, fill[0], fill[1], fill[2])
		case !scen.limitedSwap && (fill[0] == 0 || fill[1] != 0 || fill[2] < 1):
			t.Errorf("%s: swap fill: dd exit %d, memory.swap.current %d, OOM kills %d; want non-zero, 0, >= 1", sc, fill[0], fill[1], fill[2])
		default:
			t.Logf("%s: 136 MiB written past the 128 MiB limit: dd exit %d, %d bytes swapped out, %d OOM kills", sc, fill[0], fill[1], fill[2])
		}

		seen := 0
		for name, p := range pods {
			ctr := name + "/main"
			path, ok := r.path[sc][ctr]
			if !ok {
				t.Errorf("%s: no container %s", sc, ctr)
				continue
			}
			seen++
			prefix := q.podPrefix[p.qos]
			if !strings.HasPrefix(path, prefix) {
				t.Errorf("%s: %s in %s, want under %s<uid>/", sc, ctr, path, prefix)
			}
			// Swap: LimitedSwap gives an eligible container request/MemTotal*SwapTotal (the
			// kernel keeps whole pages); every other container, and every container under
			// NoSwap, gets 0. Static pods are critical (as in the kubelet): never swap.
			var wantSwap int64
			if scen.limitedSwap && p.swap && r.mode == "api" {
				wantSwap = limitedSwap(p.memReq, r.memTotal, r.swapTotal)
			}
			if got := r.cri[sc][ctr]; got != strconv.FormatInt(wantSwap, 10) {
				t.Errorf("%s: %s: nodelet asked CRI for memory.swap.max %s, want %d", sc, ctr, got, wantSwap)
			}
			podShares := shares(p.cpuReqMilli)
			wantCtr := map[string]string{
				"memory.swap.max": strconv.FormatInt(wantSwap/pageSize*pageSize, 10),
				"memory.max":      p.memMax,
				"cpu.max":         p.cpuMax,
			}
			if scen.driver == "cgroupfs" {
				// Under systemd a container scope gets systemd's DefaultTasksMax unless the
				// pod asks for a pids limit; runc sets none here.
				wantCtr["pids.max"] = "max"
			}
			checkFiles(t, sc, "container "+ctr, r.cg[sc]["container "+ctr], wantCtr)
			// The container's cpu.weight is runc's conversion of its cpu shares (runc 1.1:
			// linear); newer runtimes use the quadratic one nodelet uses for pod cgroups.
			cw := r.cg[sc]["container "+ctr]["cpu.weight"]
			lin, quad := strconv.FormatUint(runcWeight(podShares), 10), strconv.FormatUint(occgroups.ConvertCPUSharesToCgroupV2Value(podShares), 10)
			if cw != lin && cw != quad {
				t.Errorf("%s: container %s cpu.weight %s, want %s (runc 1.1) or %s", sc, ctr, cw, lin, quad)
			}
			checkFiles(t, sc, "pod "+name, r.cg[sc]["pod "+name], map[string]string{
				"memory.max": p.memMax,
				"cpu.max":    p.cpuMax,
				"cpu.weight": quad,
			})
			if wantSwap > 0 {
				t.Logf("%s: %s memory.swap.max %s = int64(%d / %d * %d) = %d, in whole pages", sc, ctr,
					r.cg[sc]["container "+ctr]["memory.swap.max"], p.memReq, r.memTotal, r.swapTotal, wantSwap)
			}
		}
		if seen != len(pods) {
			t.Errorf("%s: %d of %d containers found", sc, seen, len(pods))
		}
	}
	if r.mode != "api" {
		t.Errorf("pods came only from static manifests (no kube-apiserver binaries?): static pods are critical and never get swap, so LimitedSwap was not shown")
	}
}

func checkFiles(t *testing.T, sc, what string, got, want map[string]string) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: %s: not read", sc, what)
		return
	}
	for f, w := range want {
		if got[f] != w {
			t.Errorf("%s: %s %s = %q, want %q", sc, what, f, got[f], w)
		}
	}
}

// TestParseResults checks the parser on a few lines as scenario.sh writes them (runs without
// the VM, with -tags vm).
func TestParseResults(t *testing.T) {
	r, err := parseResults(`meminfo MemTotal 2060410880
meminfo SwapTotal 536866816
mode api
failswapon exit 1
realsystemd exit 0
swapfill limitedswap exit 0 swapcurrent 9437184 oomkill 0
mismatch exit 1
mismatch message E1203 main.go:44] "nodelet stopped with an error" err="cgroup driver mismatch: nodelet is configured with cgroupDriver \"cgroupfs\" but the container runtime uses \"systemd\""
failswapon message E1203 nodelet stopped: running with swap on is not supported (set failSwapOn: false in the config file to allow it)
container limitedswap static-burstable-nodelet-vm/main /kubepods/burstable/podx/abc
cri limitedswap burstable-swap/main unified.memory.swap.max 17486086
cg limitedswap container burstable-swap/main cpu.max 20000 100000
cg limitedswap qos kubepods memory.max 2060410880
ok
`)
	if err != nil {
		t.Fatal(err)
	}
	if !r.ok || r.mode != "api" || r.failExit != 1 || r.realSystemdExit != 0 || r.mismatchExit != 1 || r.fill["limitedswap"] != [3]int64{0, 9437184, 0} ||
		!strings.Contains(r.mismatchMsg, `cgroupDriver \"cgroupfs\"`) || r.memTotal != 2060410880 || r.swapTotal != 536866816 {
		t.Fatalf("parsed %+v", r)
	}
	if got := r.cg["limitedswap"]["container burstable-swap/main"]["cpu.max"]; got != "20000 100000" {
		t.Errorf("cpu.max %q", got)
	}
	if got := r.path["limitedswap"]["static-burstable/main"]; got != "/kubepods/burstable/podx/abc" {
		t.Errorf("path %q", got)
	}
	if got := limitedSwap(64*mi, 2060410880, 536866816); got != 17486086 {
		t.Errorf("limitedSwap = %d, want 17486086", got)
	}
	if w := runcWeight(shares(100)); w != 4 {
		t.Errorf("runcWeight(shares(100m)) = %d, want 4", w)
	}
}
