package config

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// upstreamFlag is one line of testdata/upstream-flags.txt.
type upstreamFlag struct {
	name, typ, kind, target string
	deprecated              bool
}

func readUpstreamFlags(t *testing.T) []upstreamFlag {
	t.Helper()
	f, err := os.Open("testdata/upstream-flags.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []upstreamFlag
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 5 {
			t.Fatalf("upstream-flags.txt: %q: want 5 tab-separated columns", line)
		}
		out = append(out, upstreamFlag{name: cols[0], typ: cols[1], kind: cols[2], target: cols[3], deprecated: cols[4] == "deprecated"})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sampleValue is a value of the flag's type that differs from its default.
func sampleValue(t *testing.T, fl *pflag.Flag) string {
	t.Helper()
	switch fl.Name {
	case "address", "healthz-bind-address":
		return "10.1.2.3"
	case "eviction-hard", "eviction-soft":
		return "memory.available<1Gi"
	case "node-ip":
		return "10.0.0.5"
	case "cloud-provider":
		return CloudProviderExternal
	case "version":
		return "true"
	}
	switch fl.Value.Type() {
	case "bool":
		if fl.DefValue == "true" {
			return "false"
		}
		return "true"
	case "string":
		return "/sample/" + fl.Name
	case "stringSlice":
		return "a,b"
	case "duration":
		return "7s"
	case "int32", "int", "int64", "Level":
		return "7"
	case "mapStringString":
		return "k1=v1,k2=v2"
	case "mapStringBool":
		return "SampleGate=true,OtherGate=false"
	case "colonSeparatedMultimapStringString":
		return "X-A:b,X-A:c"
	case "[]v1.Taint":
		return "k=v:NoSchedule"
	case "reserved-memory":
		return "0:memory=1Gi;1:memory=2Gi"
	case "quantity":
		return "1Ki"
	case "pattern=N,...":
		return "foo=3,bar*=1"
	}
	t.Fatalf("--%s: no sample for type %q", fl.Name, fl.Value.Type())
	return ""
}

// changedPaths lists the JSON paths at which a and b differ.
func changedPaths(t *testing.T, a, b *kubeletconfigv1beta1.KubeletConfiguration) []string {
	t.Helper()
	toMap := func(kc *kubeletconfigv1beta1.KubeletConfiguration) map[string]any {
		data, err := json.Marshal(kc)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	var out []string
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		mx, okx := x.(map[string]any)
		my, oky := y.(map[string]any)
		if !okx || !oky {
			if !reflect.DeepEqual(x, y) {
				out = append(out, path)
			}
			return
		}
		for k := range mapKeys(mx) {
			walk(joinPath(path, k), mx[k], my[k])
		}
		for k := range mapKeys(my) {
			if _, ok := mx[k]; !ok {
				walk(joinPath(path, k), nil, my[k])
			}
		}
	}
	walk("", toMap(a), toMap(b))
	slices.Sort(out)
	return out
}

// TestUpstreamFlags keeps testdata/upstream-flags.txt (every flag of the
// upstream kubelet) and nodelet's flag set equal, and checks where each
// flag ends: the named configuration field (and no other), over both the
// flags-only configuration and a loaded file; the named Options field; or a
// refusal at Load naming the flag, unless given its default.
func TestUpstreamFlags(t *testing.T) {
	want := readUpstreamFlags(t)
	if len(want) != 132 {
		t.Errorf("upstream-flags.txt lists %d flags, want the kubelet's 132", len(want))
	}
	fs := newFlagSet(&flagValues{}, flagsOnlyConfig())
	var have []string
	fs.VisitAll(func(fl *pflag.Flag) { have = append(have, fl.Name) })
	for _, uf := range want {
		if !slices.Contains(have, uf.name) {
			t.Errorf("--%s: upstream flag not registered (it would fail with \"unknown flag\")", uf.name)
		}
	}
	for _, name := range have {
		if !slices.ContainsFunc(want, func(uf upstreamFlag) bool { return uf.name == name }) {
			t.Errorf("--%s: nodelet flag is not an upstream kubelet flag; add it to upstream-flags.txt only if upstream has it", name)
		}
	}

	dir := t.TempDir()
	cfgFile := writeFile(t, dir, "config.yaml", header)
	counts := map[string]int{}
	for _, uf := range want {
		t.Run(uf.name, func(t *testing.T) {
			fl := fs.Lookup(uf.name)
			if fl == nil {
				t.Skip("not registered")
			}
			if fl.Value.Type() != uf.typ {
				t.Errorf("type %q, want %q", fl.Value.Type(), uf.typ)
			}
			if got := fl.Deprecated != ""; got != uf.deprecated {
				t.Errorf("deprecated = %v (%q), want %v", got, fl.Deprecated, uf.deprecated)
			}
			if fl.Hidden {
				t.Errorf("hidden from --help; upstream shows every flag, deprecated ones too")
			}
			sample := sampleValue(t, fl)
			arg := "--" + uf.name + "=" + sample
			counts[uf.kind]++
			switch uf.kind {
			case "field":
				// Flags-only mode: the first parse writes the field.
				base, kc := flagsOnlyConfig(), flagsOnlyConfig()
				if err := newFlagSet(&flagValues{}, kc).Parse([]string{arg}); err != nil {
					t.Fatalf("%s: %v", arg, err)
				}
				checkOnlyTarget(t, uf, changedPaths(t, base, kc))
				// With --config: the second parse wins over the file.
				fileKC, _, err := loadConfigFile(cfgFile)
				if err != nil {
					t.Fatal(err)
				}
				before := fileKC.DeepCopy()
				// A value that differs from the file's (the defaults of
				// config-file mode differ from flags-only mode's).
				arg = "--" + uf.name + "=" + sampleValue(t, newFlagSet(&flagValues{}, fileKC.DeepCopy()).Lookup(uf.name))
				if err := applyFlagPrecedence(fileKC, []string{"--config", cfgFile, arg}); err != nil {
					t.Fatalf("%s over --config: %v", arg, err)
				}
				checkOnlyTarget(t, uf, changedPaths(t, before, fileKC))
			case "option":
				checkOption(t, uf, dir, sample)
			case "refused":
				_, err := Load([]string{arg})
				if err == nil || !strings.Contains(err.Error(), "--"+uf.name+"=") || !strings.Contains(err.Error(), "not built into nodelet") {
					t.Errorf("Load(%s) = %v, want a refusal naming the flag and why", arg, err)
				}
				if _, err := Load([]string{"--" + uf.name + "=" + fl.DefValue}); err != nil {
					t.Errorf("Load(--%s=%s), the default, = %v; want it accepted", uf.name, fl.DefValue, err)
				}
			default:
				t.Fatalf("unknown kind %q", uf.kind)
			}
		})
	}
	t.Logf("upstream flags: %v", counts)
}

func checkOnlyTarget(t *testing.T, uf upstreamFlag, changed []string) {
	t.Helper()
	if len(changed) == 0 {
		t.Errorf("--%s changed nothing; want %s set", uf.name, uf.target)
	}
	for _, p := range changed {
		if p != uf.target && !strings.HasPrefix(p, uf.target+".") {
			t.Errorf("--%s changed %s; want only %s", uf.name, p, uf.target)
		}
	}
}

// checkOption loads the command line with the option and checks the
// Options field it names.
func checkOption(t *testing.T, uf upstreamFlag, dir, sample string) {
	t.Helper()
	args := []string{"--" + uf.name + "=" + sample}
	switch uf.name {
	case "config":
		args = []string{"--config=" + writeFile(t, dir, "opt-config.yaml", header)}
	case "config-dir":
		d := filepath.Join(dir, "opt-config-dir")
		writeFile(t, d, "10.conf", header)
		args = []string{"--config-dir=" + d}
	case "node-labels":
		args = []string{"--node-labels=example.com/a=b"}
	case "help":
		if _, err := Load(args); !errors.Is(err, pflag.ErrHelp) {
			t.Errorf("Load(%q) = %v, want pflag.ErrHelp", args, err)
		}
		return
	case "version":
		args = []string{"--version"}
	}
	o, err := Load(args)
	if err != nil {
		t.Fatalf("Load(%q): %v", args, err)
	}
	v := reflect.ValueOf(o).Elem()
	for _, name := range strings.Split(uf.target, ".") {
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		v = v.FieldByName(name)
		if !v.IsValid() {
			t.Fatalf("Options has no field %s", uf.target)
		}
	}
	zero := Options{}
	zero.ContainerGC = &ContainerGCFlags{MaxPerPodContainer: 1, MaxContainers: -1}
	dv := reflect.ValueOf(&zero).Elem()
	for _, name := range strings.Split(uf.target, ".") {
		if dv.Kind() == reflect.Pointer {
			dv = dv.Elem()
		}
		dv = dv.FieldByName(name)
	}
	if reflect.DeepEqual(v.Interface(), dv.Interface()) {
		t.Errorf("Load(%q): Options.%s = %v, the default; want the flag's value", args, uf.target, v.Interface())
	}
}

func TestLoadDeprecationWarnings(t *testing.T) {
	o := mustLoad(t, "--max-pods=58", "-v=2", "--provider-id=aws:///x", "--pod-infra-container-image=registry.k8s.io/pause:3.10",
		"--maximum-dead-containers=4")
	want := []string{
		"Flag --max-pods has been deprecated, " + deprecatedConfigFlag,
		"Flag --pod-infra-container-image has been deprecated, will be removed in 1.35. Image garbage collector will get sandbox image information from CRI.",
		"Flag --maximum-dead-containers has been deprecated, Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
	}
	if !reflect.DeepEqual(o.Warnings, want) {
		t.Errorf("warnings:\n%q\nwant\n%q", o.Warnings, want)
	}
	// With --config the command line is parsed a second time; its notices
	// are not repeated.
	cfg := writeFile(t, t.TempDir(), "config.yaml", header)
	if o := mustLoad(t, "--config", cfg, "--max-pods=58"); len(o.Warnings) != 1 {
		t.Errorf("warnings with --config: %q, want one", o.Warnings)
	}
	if o := mustLoad(t, "--config", cfg); len(o.Warnings) != 0 {
		t.Errorf("warnings without deprecated flags: %q", o.Warnings)
	}
}

func TestLoadFeatureGatesFlag(t *testing.T) {
	kc := mustLoad(t, "--feature-gates=LoggingAlphaOptions=true,ContextualLogging=false", "--feature-gates", "LoggingBetaOptions=true").Config
	if want := map[string]bool{"LoggingAlphaOptions": true, "ContextualLogging": false, "LoggingBetaOptions": true}; !reflect.DeepEqual(kc.FeatureGates, want) {
		t.Errorf("featureGates = %v, want %v", kc.FeatureGates, want)
	}
	// Gates from the file that the flag does not name are kept; the flag
	// wins for the ones it names (upstream's kubeletConfigFlagPrecedence).
	dir := t.TempDir()
	cfg := writeFile(t, dir, "config.yaml", header+"featureGates:\n  LoggingAlphaOptions: true\n  ContextualLogging: false\n")
	writeFile(t, filepath.Join(dir, "d"), "10.conf", header+"featureGates:\n  ContainerRestartRules: true\n")
	kc = mustLoad(t, "--config", cfg, "--config-dir", filepath.Join(dir, "d"), "--feature-gates=ContextualLogging=true,LoggingBetaOptions=true").Config
	if want := map[string]bool{"LoggingAlphaOptions": true, "ContextualLogging": true, "LoggingBetaOptions": true, "ContainerRestartRules": true}; !reflect.DeepEqual(kc.FeatureGates, want) {
		t.Errorf("featureGates = %v, want %v", kc.FeatureGates, want)
	}
	kc = mustLoad(t, "--config", cfg).Config
	if want := map[string]bool{"LoggingAlphaOptions": true, "ContextualLogging": false}; !reflect.DeepEqual(kc.FeatureGates, want) {
		t.Errorf("featureGates without the flag = %v, want the file's %v", kc.FeatureGates, want)
	}
	for _, bad := range []string{"--feature-gates=LoggingAlphaOptions", "--feature-gates=LoggingAlphaOptions=maybe"} {
		if _, err := Load([]string{bad}); err == nil || !strings.Contains(err.Error(), "feature-gates") {
			t.Errorf("Load(%s) = %v, want an error naming --feature-gates", bad, err)
		}
	}
}

func TestLoadFlagsWinForMapsAndLogging(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "config.yaml", header+`
evictionHard:
  memory.available: 300Mi
  nodefs.available: 5%
systemReserved:
  cpu: 100m
logging:
  verbosity: 2
  format: text
staticPodURLHeader:
  X-A: [from-file]
`)
	kc := mustLoad(t, "--config", cfg, "--eviction-hard=memory.available<1Gi", "--system-reserved=memory=1Gi",
		"-v=5", "--vmodule=foo=3", "--log-flush-frequency=3s", "--manifest-url-header=X-B:1,X-B:2").Config
	checks := []struct {
		name      string
		got, want any
	}{
		// A map flag replaces the file's map, as upstream's re-parse does.
		{"evictionHard", kc.EvictionHard, map[string]string{"memory.available": "1Gi"}},
		{"systemReserved", kc.SystemReserved, map[string]string{"memory": "1Gi"}},
		{"logging.verbosity", uint32(kc.Logging.Verbosity), uint32(5)},
		{"logging.vmodule", len(kc.Logging.VModule), 1},
		{"logging.flushFrequency", kc.Logging.FlushFrequency.Duration.Duration, 3 * time.Second},
		{"logging.format from file", kc.Logging.Format, "text"},
		{"staticPodURLHeader", kc.StaticPodURLHeader, map[string][]string{"X-B": {"1", "2"}}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestLoadCloudProvider(t *testing.T) {
	for _, ok := range []string{"", "external"} {
		o := mustLoad(t, "--cloud-provider="+ok, "--provider-id=aws:///eu-west-1a/i-0123")
		if o.CloudProvider != ok || o.Config.ProviderID != "aws:///eu-west-1a/i-0123" {
			t.Errorf("--cloud-provider=%s: CloudProvider=%q providerID=%q", ok, o.CloudProvider, o.Config.ProviderID)
		}
	}
	for _, bad := range []string{"aws", "gce", "azure"} {
		_, err := Load([]string{"--cloud-provider=" + bad})
		if err == nil || !strings.Contains(err.Error(), "--cloud-provider="+bad+": built-in cloud providers were removed upstream") {
			t.Errorf("--cloud-provider=%s: %v, want a refusal naming the flag", bad, err)
		}
	}
}

func TestLoadHelpAndVersion(t *testing.T) {
	for _, h := range []string{"-h", "--help", "--help=true"} {
		if _, err := Load([]string{"--max-pods=3", h}); !errors.Is(err, pflag.ErrHelp) {
			t.Errorf("Load(%s) = %v, want pflag.ErrHelp", h, err)
		}
	}
	if o := mustLoad(t, "--version"); !o.ShowVersion || o.VersionRaw || o.Config != nil {
		t.Errorf("--version: %+v", o)
	}
	if o := mustLoad(t, "--version=raw"); !o.ShowVersion || !o.VersionRaw {
		t.Errorf("--version=raw: %+v", o)
	}
	if o := mustLoad(t, "--version=false"); o.ShowVersion || o.Config == nil {
		t.Errorf("--version=false should run normally: %+v", o)
	}
	if _, err := Load([]string{"--version=v1.2.3"}); err == nil || !strings.Contains(err.Error(), "--version=v1.2.3") {
		t.Errorf("--version=v1.2.3: %v, want a refusal naming the flag", err)
	}
	u := Usage()
	for _, want := range []string{"--feature-gates", "--image-credential-provider-config", "-v, --v Level",
		"--address string", "(DEPRECATED: This parameter should be set via the config file", "-h, --help"} {
		if !strings.Contains(u, want) {
			t.Errorf("usage lacks %q", want)
		}
	}
}

func TestLoadContainerGCFlags(t *testing.T) {
	o := mustLoad(t)
	if *o.ContainerGC != (ContainerGCFlags{MinimumTTL: 0, MaxPerPodContainer: 1, MaxContainers: -1}) {
		t.Errorf("default container GC flags = %+v, want upstream's 0s, 1, -1", *o.ContainerGC)
	}
	o = mustLoad(t, "--minimum-container-ttl-duration=1m", "--maximum-dead-containers-per-container=2", "--maximum-dead-containers=100")
	if *o.ContainerGC != (ContainerGCFlags{MinimumTTL: time.Minute, MaxPerPodContainer: 2, MaxContainers: 100}) {
		t.Errorf("container GC flags = %+v", *o.ContainerGC)
	}
}

func TestReservedMemoryFlag(t *testing.T) {
	kc := flagsOnlyConfig()
	fs := newFlagSet(&flagValues{}, kc)
	if err := fs.Parse([]string{"--reserved-memory", "0:memory=1Gi,hugepages-1Gi=2Gi", "--reserved-memory=1:memory=512Mi"}); err != nil {
		t.Fatal(err)
	}
	if len(kc.ReservedMemory) != 2 || kc.ReservedMemory[0].NumaNode != 0 || kc.ReservedMemory[1].NumaNode != 1 {
		t.Fatalf("reservedMemory = %+v", kc.ReservedMemory)
	}
	if q := kc.ReservedMemory[0].Limits[v1.ResourceName("hugepages-1Gi")]; q.String() != "2Gi" {
		t.Errorf("hugepages-1Gi = %s", q.String())
	}
	for _, bad := range []string{"memory=1Gi", "x:memory=1Gi", "0:memory", "0:memory=lots", "0:memory=1Gi,memory=2Gi"} {
		if err := newFlagSet(&flagValues{}, flagsOnlyConfig()).Parse([]string{"--reserved-memory=" + bad}); err == nil {
			t.Errorf("--reserved-memory=%s parsed; want an error", bad)
		}
	}
	if _, err := Load([]string{"--address=not-an-ip"}); err == nil || !strings.Contains(err.Error(), `"not-an-ip" is not a valid IP address`) {
		t.Errorf("--address=not-an-ip: %v", err)
	}
}

// envArgs splits NAME="..." out of an EnvironmentFile the way systemd
// expands an unquoted $NAME on ExecStart: at whitespace.
func envArgs(t *testing.T, env, name string) []string {
	t.Helper()
	for line := range strings.Lines(env) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && k == name {
			return strings.Fields(strings.Trim(v, `"`))
		}
	}
	t.Fatalf("%s not in %q", name, env)
	return nil
}

// TestLoadKubeadmFlagsEnv: the kubeadm-flags.env kubeadm writes for a node of
// a cluster with an external cloud provider loads, beside kubeadm's config.
func TestLoadKubeadmFlagsEnv(t *testing.T) {
	env := `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10 --cloud-provider=external --node-ip=10.0.0.5"` + "\n"
	cfg := writeFile(t, t.TempDir(), "config.yaml", header+"cgroupDriver: systemd\n")
	args := append([]string{"--config=" + cfg, "--kubeconfig=/etc/kubernetes/kubelet.conf", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf"},
		envArgs(t, env, "KUBELET_KUBEADM_ARGS")...)
	o := mustLoad(t, args...)
	if o.CloudProvider != "external" || o.PodInfraContainerImage != "registry.k8s.io/pause:3.10" ||
		len(o.NodeIPs) != 1 || o.NodeIPs[0].String() != "10.0.0.5" ||
		o.Config.ContainerRuntimeEndpoint != "unix:///var/run/containerd/containerd.sock" || o.Config.CgroupDriver != "systemd" {
		t.Errorf("kubeadm flags: cloudProvider=%q sandbox=%q nodeIPs=%v endpoint=%q cgroupDriver=%q",
			o.CloudProvider, o.PodInfraContainerImage, o.NodeIPs, o.Config.ContainerRuntimeEndpoint, o.Config.CgroupDriver)
	}
}

// TestLoadManagedNodeBootstrapFlags: an EKS-style bootstrap command line is
// taken whole, the credential provider plugin flags included (the agent reads
// the plugins' config at start).
func TestLoadManagedNodeBootstrapFlags(t *testing.T) {
	env := `KUBELET_EXTRA_ARGS="--node-labels=eks.amazonaws.com/nodegroup=ng-1,eks.amazonaws.com/capacityType=ON_DEMAND --register-with-taints=dedicated=gpu:NoSchedule --max-pods=58 --image-credential-provider-config=/etc/eks/image-credential-provider/config.json --image-credential-provider-bin-dir=/etc/eks/image-credential-provider"` + "\n"
	cfg := writeFile(t, t.TempDir(), "config.json", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","clusterDNS":["172.20.0.10"],"cgroupDriver":"systemd"}`)
	args := append([]string{"--config=" + cfg, "--cloud-provider=external", "--hostname-override=ip-10-0-0-5.ec2.internal"}, envArgs(t, env, "KUBELET_EXTRA_ARGS")...)
	o := mustLoad(t, args...)
	if o.Config.MaxPods != 58 || o.NodeLabels["eks.amazonaws.com/nodegroup"] != "ng-1" ||
		len(o.Config.RegisterWithTaints) != 1 || o.Config.RegisterWithTaints[0].Key != "dedicated" || o.CloudProvider != "external" {
		t.Errorf("bootstrap flags: maxPods=%d labels=%v taints=%v", o.Config.MaxPods, o.NodeLabels, o.Config.RegisterWithTaints)
	}
	if o.ImageCredentialProviderConfig != "/etc/eks/image-credential-provider/config.json" || o.ImageCredentialProviderBinDir != "/etc/eks/image-credential-provider" {
		t.Errorf("credential provider flags: config %q, bin dir %q", o.ImageCredentialProviderConfig, o.ImageCredentialProviderBinDir)
	}
}

// TestDeployDropInCommandLine expands deploy/10-nodelet.conf as systemd
// does (Environment=, then each EnvironmentFile= in order, an unquoted $VAR
// split at whitespace) over the files of a kubeadm node, and loads the
// result: KUBELET_EXTRA_ARGS from /etc/default/kubelet reaches nodelet, and
// NODELET_EXTRA_ARGS from /etc/default/nodelet comes last, so it wins.
func TestDeployDropInCommandLine(t *testing.T) {
	data, err := os.ReadFile("../deploy/10-nodelet.conf")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"/var/lib/kubelet/kubeadm-flags.env": `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --cloud-provider=external --node-ip=10.0.0.5"`,
		"/etc/default/kubelet":               `KUBELET_EXTRA_ARGS="--max-pods=58 --node-labels=example.com/pool=a"`,
		"/etc/default/nodelet":               `NODELET_EXTRA_ARGS="--max-pods=60"`,
	}
	env := map[string]string{}
	var execStart string
	var read []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "Environment="):
			k, v, _ := strings.Cut(strings.Trim(strings.TrimPrefix(line, "Environment="), `"`), "=")
			env[k] = v
		case strings.HasPrefix(line, "EnvironmentFile=-"):
			path := strings.TrimPrefix(line, "EnvironmentFile=-")
			read = append(read, path)
			for l := range strings.Lines(files[path]) {
				if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
					env[k] = strings.Trim(v, `"`)
				}
			}
		case strings.HasPrefix(line, "ExecStart="):
			execStart = strings.TrimPrefix(line, "ExecStart=")
		}
	}
	wantRead := []string{"/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet", "/etc/default/nodelet"}
	if !reflect.DeepEqual(read, wantRead) {
		t.Errorf("EnvironmentFile= order %q, want %q", read, wantRead)
	}
	fields := strings.Fields(execStart)
	if len(fields) == 0 || fields[0] != "/usr/local/bin/nodelet" {
		t.Fatalf("ExecStart=%q", execStart)
	}
	cfg := writeFile(t, t.TempDir(), "config.yaml", header)
	var args []string
	for _, f := range fields[1:] {
		if strings.HasPrefix(f, "$") {
			args = append(args, strings.Fields(env[strings.TrimPrefix(f, "$")])...)
		} else {
			args = append(args, f)
		}
	}
	for i, a := range args {
		if a == "--config=/var/lib/kubelet/config.yaml" {
			args[i] = "--config=" + cfg
		}
	}
	o := mustLoad(t, args...)
	if o.Config.MaxPods != 60 || o.NodeLabels["example.com/pool"] != "a" || o.CloudProvider != "external" ||
		o.Kubeconfig != "/etc/kubernetes/kubelet.conf" || o.Config.ContainerRuntimeEndpoint != "unix:///var/run/containerd/containerd.sock" {
		t.Errorf("from the drop-in (%q): maxPods=%d labels=%v cloudProvider=%q kubeconfig=%q", args, o.Config.MaxPods, o.NodeLabels, o.CloudProvider, o.Kubeconfig)
	}
}

// --housekeeping-interval is upstream's (cAdvisor's flag, re-registered by the
// kubelet): a kubeadm-flags.env or unit that passes it must start nodelet.
func TestLoadHousekeepingInterval(t *testing.T) {
	if o := mustLoad(t); o.HousekeepingInterval != 10*time.Second {
		t.Errorf("default %v, want the kubelet's 10s", o.HousekeepingInterval)
	}
	if o := mustLoad(t, "--housekeeping-interval=30s"); o.HousekeepingInterval != 30*time.Second || len(o.Warnings) != 0 {
		t.Errorf("--housekeeping-interval=30s: %v, warnings %q", o.HousekeepingInterval, o.Warnings)
	}
	if _, err := Load([]string{"--housekeeping-interval=0s"}); err == nil || !strings.Contains(err.Error(), "--housekeeping-interval=0s: must be greater than zero") {
		t.Errorf("--housekeeping-interval=0s: %v", err)
	}
	if !strings.Contains(Usage(), "--housekeeping-interval duration") || !strings.Contains(Usage(), "Interval between container housekeepings (default 10s)") {
		t.Errorf("--help does not list --housekeeping-interval as upstream")
	}
}
