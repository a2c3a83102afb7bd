package cgroups

import "encoding/json"

// runcShimV2 is the runtime type whose options carry SystemdCgroup.
const runcShimV2 = "io.containerd.runc.v2"

// DriverFromRuntimeInfo reads the cgroup driver from a CRI verbose Status info map,
// for runtimes that do not implement RuntimeConfig (containerd before 2.0 answers it
// Unimplemented). containerd's CRI plugin puts its config there as JSON under "config";
// the driver is the default runtime's runc option:
//
//	config.containerd.runtimes[config.containerd.defaultRuntimeName].options.SystemdCgroup
//
// (The top-level "systemdCgroup" belongs to the removed v1 linux runtime and is not
// what runc uses.) A runc shim v2 runtime without that option runs with cgroupfs, the
// shim's default. "" when the info says nothing usable: another runtime, another
// runtime type, or no such JSON.
func DriverFromRuntimeInfo(info map[string]string) string {
	raw, ok := info["config"]
	if !ok {
		return ""
	}
	var cfg struct {
		Containerd struct {
			DefaultRuntimeName string `json:"defaultRuntimeName"`
			Runtimes           map[string]struct {
				RuntimeType string `json:"runtimeType"`
				Options     struct {
					SystemdCgroup *bool `json:"SystemdCgroup"`
				} `json:"options"`
			} `json:"runtimes"`
		} `json:"containerd"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return ""
	}
	rt, ok := cfg.Containerd.Runtimes[cfg.Containerd.DefaultRuntimeName]
	if !ok {
		return ""
	}
	switch {
	case rt.Options.SystemdCgroup != nil && *rt.Options.SystemdCgroup:
		return string(DriverSystemd)
	case rt.Options.SystemdCgroup != nil, rt.RuntimeType == runcShimV2:
		return string(DriverCgroupfs)
	}
	return ""
}
