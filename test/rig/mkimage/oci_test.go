package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
)

// readTar returns the regular files of a tar by name, and the headers of all entries.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files := map[string][]byte{}
	hdrs := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, hdrs
		}
		if err != nil {
			t.Fatalf("reading tar: %v", err)
		}
		hdrs[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("reading %s: %v", h.Name, err)
			}
			files[h.Name] = b
		}
	}
}

func TestWriteOCILayout(t *testing.T) {
	tests := []struct {
		name       string
		spec       ImageSpec
		wantFiles  map[string]string // path in layer -> content
		wantLinks  map[string]string // path in layer -> symlink target
		wantEntry  []string
		wantCmd    []string
		wantTagged string
	}{
		{
			name:       "busybox",
			spec:       BusyboxSpec([]byte("BUSYBOX"), []string{"sh", "sleep", "httpd", "sh"}),
			wantFiles:  map[string]string{"bin/busybox": "BUSYBOX"},
			wantLinks:  map[string]string{"bin/sh": "busybox", "bin/sleep": "busybox", "bin/httpd": "busybox"},
			wantCmd:    []string{"sh"},
			wantTagged: "nodelet.local/busybox:latest",
		},
		{
			name:       "pause",
			spec:       PauseSpec([]byte("PAUSE")),
			wantFiles:  map[string]string{"pause": "PAUSE"},
			wantEntry:  []string{"/pause"},
			wantTagged: "localhost:5000/pause:v1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.Name = tc.wantTagged
			var out, again bytes.Buffer
			if err := WriteOCILayout(&out, tc.spec); err != nil {
				t.Fatalf("WriteOCILayout: %v", err)
			}
			if err := WriteOCILayout(&again, tc.spec); err != nil {
				t.Fatalf("WriteOCILayout (again): %v", err)
			}
			if !bytes.Equal(out.Bytes(), again.Bytes()) {
				t.Errorf("output is not deterministic")
			}
			files, _ := readTar(t, &out)
			if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
				t.Errorf("oci-layout = %q", files["oci-layout"])
			}
			for name, b := range files {
				if hex, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
					if got := digestOf(b); got != "sha256:"+hex {
						t.Errorf("blob %s has digest %s", name, got)
					}
				}
			}
			var idx Index
			if err := json.Unmarshal(files["index.json"], &idx); err != nil {
				t.Fatalf("index.json: %v", err)
			}
			if len(idx.Manifests) != 1 {
				t.Fatalf("index has %d manifests, want 1", len(idx.Manifests))
			}
			if got := idx.Manifests[0].Annotations[annotationContainerdName]; got != tc.wantTagged {
				t.Errorf("image name annotation = %q, want %q", got, tc.wantTagged)
			}
			var man Manifest
			if err := json.Unmarshal(files[blobPath(idx.Manifests[0].Digest)], &man); err != nil {
				t.Fatalf("manifest: %v", err)
			}
			var cfg ImageConfig
			if err := json.Unmarshal(files[blobPath(man.Config.Digest)], &cfg); err != nil {
				t.Fatalf("config: %v", err)
			}
			if len(man.Layers) != 1 || len(cfg.RootFS.DiffIDs) != 1 {
				t.Fatalf("want one layer, got %d layers and %d diff ids", len(man.Layers), len(cfg.RootFS.DiffIDs))
			}
			zr, err := gzip.NewReader(bytes.NewReader(files[blobPath(man.Layers[0].Digest)]))
			if err != nil {
				t.Fatalf("layer gzip: %v", err)
			}
			raw, err := io.ReadAll(zr)
			if err != nil {
				t.Fatalf("layer gunzip: %v", err)
			}
			if got := digestOf(raw); got != cfg.RootFS.DiffIDs[0] {
				t.Errorf("diff id = %s, uncompressed layer is %s", cfg.RootFS.DiffIDs[0], got)
			}
			lfiles, lhdrs := readTar(t, bytes.NewReader(raw))
			for p, want := range tc.wantFiles {
				if got := string(lfiles[p]); got != want {
					t.Errorf("layer file %s = %q, want %q", p, got, want)
				}
			}
			for p, want := range tc.wantLinks {
				if h := lhdrs[p]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != want {
					t.Errorf("layer symlink %s = %+v, want -> %s", p, h, want)
				}
			}
			if h := lhdrs["tmp/"]; h == nil || h.Mode != 0o1777 {
				t.Errorf("layer /tmp = %+v, want mode 1777", h)
			}
			if _, ok := lfiles["etc/passwd"]; !ok {
				t.Errorf("layer has no /etc/passwd")
			}
			if !slices.Equal(cfg.Config.Entrypoint, tc.wantEntry) || !slices.Equal(cfg.Config.Cmd, tc.wantCmd) {
				t.Errorf("entrypoint/cmd = %v/%v, want %v/%v", cfg.Config.Entrypoint, cfg.Config.Cmd, tc.wantEntry, tc.wantCmd)
			}
		})
	}
}

func TestLastTagColon(t *testing.T) {
	tests := []struct {
		ref  string
		want int
	}{
		{"nodelet.local/busybox:latest", 21},
		{"localhost:5000/busybox", -1},
		{"busybox", -1},
	}
	for _, tc := range tests {
		if got := lastTagColon(tc.ref); got != tc.want {
			t.Errorf("lastTagColon(%q) = %d, want %d", tc.ref, got, tc.want)
		}
	}
}
