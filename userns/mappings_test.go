package userns

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

func TestKubeletMappings(t *testing.T) {
	const u = UnitLength
	subids := func(uids, gids string) func(string, ...string) ([]byte, error) {
		return func(name string, args ...string) ([]byte, error) {
			if name != "/usr/bin/getsubids" {
				return nil, fmt.Errorf("ran %s", name)
			}
			if len(args) == 2 && args[0] == "-g" && args[1] == KubeletUser {
				return []byte(gids), nil
			}
			if len(args) == 1 && args[0] == KubeletUser {
				return []byte(uids), nil
			}
			return nil, fmt.Errorf("unexpected args %v", args)
		}
	}
	found := func(string) (bool, error) { return true, nil }
	installed := func(string) (string, error) { return "/usr/bin/getsubids", nil }
	cases := []struct {
		name              string
		host              Host
		idsPerPod         uint32
		wantFirst, wantLn uint32
		wantErr           string
	}{
		{
			name:      "no kubelet user: the default",
			host:      Host{UserExists: func(string) (bool, error) { return false, nil }},
			idsPerPod: u, wantFirst: u, wantLn: 1<<32 - u,
		},
		{
			name:      "no kubelet user, two units per pod: the default cut to whole ranges",
			host:      Host{UserExists: func(string) (bool, error) { return false, nil }},
			idsPerPod: 3 * u, wantFirst: 3 * u, wantLn: 21844 * 3 * u,
		},
		{
			name: "kubelet user without getsubids: the default",
			host: Host{UserExists: found, LookPath: func(f string) (string, error) {
				return "", &exec.Error{Name: f, Err: exec.ErrNotFound}
			}},
			idsPerPod: u, wantFirst: u, wantLn: 1<<32 - u,
		},
		{
			name:      "kubelet user with subordinate IDs",
			host:      Host{UserExists: found, LookPath: installed, Output: subids("0: kubelet 65536 2147483648\n", "0: kubelet 65536 2147483648\n")},
			idsPerPod: u, wantFirst: 65536, wantLn: 2147483648,
		},
		{
			name:      "user lookup fails",
			host:      Host{UserExists: func(string) (bool, error) { return false, errors.New("nss down") }},
			idsPerPod: u, wantErr: `looking up user "kubelet": nss down`,
		},
		{
			name:      "different subuids and subgids",
			host:      Host{UserExists: found, LookPath: installed, Output: subids("0: kubelet 65536 655360\n", "0: kubelet 131072 655360\n")},
			idsPerPod: u, wantErr: `mismatched subuids and subgids for user "kubelet"`,
		},
		{
			name: "getsubids fails",
			host: Host{UserExists: found, LookPath: installed, Output: func(string, ...string) ([]byte, error) {
				return nil, errors.New("exit status 1")
			}},
			idsPerPod: u, wantErr: `error retrieving additional ids for user "kubelet"`,
		},
		{
			name:      "two ranges",
			host:      Host{UserExists: found, LookPath: installed, Output: subids("0: kubelet 65536 65536\n1: kubelet 655360 65536\n", "0: kubelet 65536 65536\n1: kubelet 655360 65536\n")},
			idsPerPod: u, wantErr: "it must contain only one line",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first, length, err := KubeletMappings(tc.host, tc.idsPerPod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if first != tc.wantFirst || length != tc.wantLn {
				t.Errorf("mapping %d+%d, want %d+%d", first, length, tc.wantFirst, tc.wantLn)
			}
			if _, err := NewAllocator(first, length, tc.idsPerPod, 110); err != nil {
				t.Errorf("the mapping does not make an allocator: %v", err)
			}
		})
	}
}

func TestParseGetSubIDs(t *testing.T) {
	cases := []struct {
		in                string
		wantFirst, wantLn uint32
		wantErr           string
	}{
		{in: "0: kubelet 65536 2147483648\n", wantFirst: 65536, wantLn: 2147483648},
		{in: "0: kubelet 65536 2147483648", wantFirst: 65536, wantLn: 2147483648},
		{in: "", wantErr: "invalid line"},
		{in: "0: kubelet 65536\n", wantErr: "invalid line"},
		{in: "0: kubelet x 65536\n", wantErr: "error parsing line"},
		{in: "0: kubelet 65536 4294967296\n", wantErr: "error parsing line"},
		{in: "0: kubelet 1 2\n\n1: kubelet 3 4\n", wantErr: "only one line"},
	}
	for _, tc := range cases {
		first, length, err := ParseGetSubIDs(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || first != tc.wantFirst || length != tc.wantLn {
			t.Errorf("%q = %d, %d, %v; want %d, %d", tc.in, first, length, err, tc.wantFirst, tc.wantLn)
		}
	}
}
