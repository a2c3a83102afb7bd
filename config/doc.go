// Package config builds nodelet's KubeletConfiguration the way the upstream
// kubelet does: command-line flags, a --config file, --config-dir drop-ins
// merged as JSON merge patches, upstream defaults, flag precedence and
// validation.
//
// Every upstream flag parses (testdata/upstream-flags.txt; deprecated ones log
// upstream's notice). Config files are decoded leniently as upstream: an
// unknown field is a warning naming it, not an error. fields.go classifies
// every KubeletConfiguration field as wired (naming the test that proves it),
// refused when set (the start stops naming the field), or without effect
// upstream either; a test fails when a new upstream field is not classified.
// featuregates.go is the 1.37 feature gate registry (unknown gates and gates
// of features nodelet lacks are refused by name). Logging is applied through
// component-base. Resolve turns the configuration into the plain values each
// part takes (Settings), so no part applies a default of its own.
package config
