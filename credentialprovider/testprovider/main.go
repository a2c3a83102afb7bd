// Command testprovider is an image credential provider plugin for tests
// (unit and e2e): it reads a CredentialProviderRequest on stdin and answers
// with the credentials its environment names. Each run appends the image and
// its arguments to $PROVIDER_LOG, so tests count runs.
//
//	PROVIDER_USER, PROVIDER_PASSWORD  the credential (required)
//	PROVIDER_PATTERN                  the auth key (default: the request's registry)
//	PROVIDER_CACHE_KEY_TYPE           Image, Registry or Global (default Image)
//	PROVIDER_CACHE_DURATION           the response's cacheDuration (default: none)
//	PROVIDER_FAIL                     exit 1 with this message on stderr
//	PROVIDER_API_VERSION              answer with this apiVersion instead of the request's
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

func main() {
	var req struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Image      string `json:"image"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "decoding the request: %v\n", err)
		os.Exit(2)
	}
	if log := os.Getenv("PROVIDER_LOG"); log != "" {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			fmt.Fprintf(f, "%s %s %s\n", req.Kind, req.Image, strings.Join(os.Args[1:], ","))
			f.Close()
		}
	}
	if msg := os.Getenv("PROVIDER_FAIL"); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
	pattern := os.Getenv("PROVIDER_PATTERN")
	if pattern == "" {
		pattern, _, _ = strings.Cut(req.Image, "/")
	}
	keyType := os.Getenv("PROVIDER_CACHE_KEY_TYPE")
	if keyType == "" {
		keyType = "Image"
	}
	apiVersion := req.APIVersion
	if v := os.Getenv("PROVIDER_API_VERSION"); v != "" {
		apiVersion = v
	}
	resp := map[string]any{
		"apiVersion":   apiVersion,
		"kind":         "CredentialProviderResponse",
		"cacheKeyType": keyType,
		"auth": map[string]any{pattern: map[string]string{
			"username": os.Getenv("PROVIDER_USER"), "password": os.Getenv("PROVIDER_PASSWORD"),
		}},
	}
	if d := os.Getenv("PROVIDER_CACHE_DURATION"); d != "" {
		resp["cacheDuration"] = d
	}
	if err := json.NewEncoder(os.Stdout).Encode(resp); err != nil {
		os.Exit(3)
	}
}
