package agent

import "fmt"

// externalCloudProvider reads --cloud-provider: "external" hands the Node's
// initialisation (addresses, the uninitialized taint's removal) to a cloud
// controller manager; "" is none. Upstream has no in-tree providers left, so
// any other name is refused.
func externalCloudProvider(name string) (bool, error) {
	switch name {
	case "":
		return false, nil
	case "external":
		return true, nil
	}
	return false, fmt.Errorf("--cloud-provider=%q: only \"external\" (a cloud controller manager) or none is supported, as upstream has no in-tree cloud providers", name)
}
