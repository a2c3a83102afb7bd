package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"runtime"
	"sort"
	"time"
)

// OCI media types and annotation keys (image-spec v1.1), spelled out to keep the module free
// of an image-spec dependency for a test tool.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"

	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// epoch is the mtime of every file the tool writes: fixed, so digests are reproducible.
func epoch() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }

// Entry is one file system object of the image's single layer.
type Entry struct {
	Path     string // absolute path in the rootfs, e.g. /bin/sh
	Mode     int64  // permission bits (and sticky bit)
	Dir      bool
	Linkname string // symlink target when set
	Content  []byte // regular file content
}

// ImageSpec describes a one-layer image.
type ImageSpec struct {
	Name       string // image reference, e.g. nodelet.local/busybox:latest
	Entries    []Entry
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is an OCI platform.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Index is an OCI image index (index.json).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// ImageConfig is the OCI image configuration blob.
type ImageConfig struct {
	Architecture string       `json:"architecture"`
	OS           string       `json:"os"`
	Created      string       `json:"created"`
	Config       RuntimeConf  `json:"config"`
	RootFS       RootFS       `json:"rootfs"`
	History      []HistoryRec `json:"history"`
}

// RuntimeConf is the "config" member of the image configuration.
type RuntimeConf struct {
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	Env        []string `json:"Env,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
	User       string   `json:"User,omitempty"`
}

// RootFS lists the layers' uncompressed digests.
type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// HistoryRec is one history entry of the image configuration.
type HistoryRec struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// baseEntries are the directories and files every rig image has: enough for a container to run
// as root or nobody and to write to /tmp.
func baseEntries() []Entry {
	return []Entry{
		{Path: "/bin", Dir: true, Mode: 0o755},
		{Path: "/dev", Dir: true, Mode: 0o755},
		{Path: "/etc", Dir: true, Mode: 0o755},
		{Path: "/etc/passwd", Mode: 0o644, Content: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")},
		{Path: "/etc/group", Mode: 0o644, Content: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{Path: "/home", Dir: true, Mode: 0o755},
		{Path: "/proc", Dir: true, Mode: 0o755},
		{Path: "/root", Dir: true, Mode: 0o700},
		{Path: "/sys", Dir: true, Mode: 0o755},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/usr", Dir: true, Mode: 0o755},
		{Path: "/usr/bin", Dir: true, Mode: 0o755},
		{Path: "/var", Dir: true, Mode: 0o755},
		{Path: "/var/www", Dir: true, Mode: 0o755},
	}
}

// BusyboxSpec is nodelet.local/busybox: the static busybox with a symlink per applet in /bin.
func BusyboxSpec(busybox []byte, applets []string) ImageSpec {
	entries := append(baseEntries(), Entry{Path: "/bin/busybox", Mode: 0o755, Content: busybox})
	seen := map[string]bool{"busybox": true}
	for _, a := range applets {
		if seen[a] {
			continue
		}
		seen[a] = true
		entries = append(entries, Entry{Path: "/bin/" + a, Linkname: "busybox", Mode: 0o777})
	}
	return ImageSpec{
		Entries:    entries,
		Cmd:        []string{"sh"},
		Env:        []string{defaultPath},
		WorkingDir: "/",
	}
}

// PauseSpec is nodelet.local/pause: the rig's pause binary as /pause.
func PauseSpec(pause []byte) ImageSpec {
	return ImageSpec{
		Entries:    append(baseEntries(), Entry{Path: "/pause", Mode: 0o755, Content: pause}),
		Entrypoint: []string{"/pause"},
		Env:        []string{defaultPath},
		WorkingDir: "/",
	}
}

// ScratchSpec is an image with only the base directories: the flags add the rest.
func ScratchSpec() ImageSpec {
	return ImageSpec{Entries: baseEntries(), Env: []string{defaultPath}, WorkingDir: "/"}
}

// buildLayer returns the layer as an uncompressed tar (for the diff ID) and gzipped.
func buildLayer(entries []Entry) (raw, gz []byte, err error) {
	sorted := append([]Entry(nil), entries...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range sorted {
		name := path.Clean("/" + e.Path)[1:]
		if name == "" {
			continue
		}
		hdr := &tar.Header{Name: name, Mode: e.Mode, ModTime: epoch(), Uname: "root", Gname: "root"}
		switch {
		case e.Dir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case e.Linkname != "":
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = e.Linkname
		default:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.Content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, nil, fmt.Errorf("writing tar header for %s: %w", e.Path, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Content); err != nil {
				return nil, nil, fmt.Errorf("writing %s: %w", e.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, nil, fmt.Errorf("closing layer tar: %w", err)
	}
	raw = buf.Bytes()
	var zbuf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&zbuf, gzip.BestSpeed)
	if err != nil {
		return nil, nil, fmt.Errorf("creating gzip writer: %w", err)
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, nil, fmt.Errorf("compressing layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, nil, fmt.Errorf("compressing layer: %w", err)
	}
	return raw, zbuf.Bytes(), nil
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// WriteOCILayout writes spec as an OCI image layout tar: oci-layout, index.json, blobs/sha256/*.
func WriteOCILayout(w io.Writer, spec ImageSpec) error {
	raw, gz, err := buildLayer(spec.Entries)
	if err != nil {
		return err
	}
	created := epoch().Format(time.RFC3339)
	cfg := ImageConfig{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      created,
		Config: RuntimeConf{
			Entrypoint: spec.Entrypoint,
			Cmd:        spec.Cmd,
			Env:        spec.Env,
			WorkingDir: spec.WorkingDir,
			User:       spec.User,
		},
		RootFS:  RootFS{Type: "layers", DiffIDs: []string{digestOf(raw)}},
		History: []HistoryRec{{Created: created, CreatedBy: "nodelet test/rig/mkimage"}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding image config: %w", err)
	}
	man := Manifest{
		SchemaVersion: 2,
		MediaType:     mediaTypeManifest,
		Config:        Descriptor{MediaType: mediaTypeConfig, Digest: digestOf(cfgJSON), Size: int64(len(cfgJSON))},
		Layers:        []Descriptor{{MediaType: mediaTypeLayer, Digest: digestOf(gz), Size: int64(len(gz))}},
	}
	manJSON, err := json.Marshal(man)
	if err != nil {
		return fmt.Errorf("encoding manifest: %w", err)
	}
	tag := "latest"
	if i := lastTagColon(spec.Name); i >= 0 {
		tag = spec.Name[i+1:]
	}
	idx := Index{
		SchemaVersion: 2,
		MediaType:     mediaTypeIndex,
		Manifests: []Descriptor{{
			MediaType: mediaTypeManifest,
			Digest:    digestOf(manJSON),
			Size:      int64(len(manJSON)),
			Annotations: map[string]string{
				annotationContainerdName: spec.Name,
				annotationRefName:        tag,
			},
			Platform: &Platform{Architecture: runtime.GOARCH, OS: "linux"},
		}},
	}
	idxJSON, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("encoding index: %w", err)
	}

	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idxJSON},
		{blobPath(digestOf(manJSON)), manJSON},
		{blobPath(digestOf(cfgJSON)), cfgJSON},
		{blobPath(digestOf(gz)), gz},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch()}); err != nil {
			return fmt.Errorf("writing %s: %w", d, err)
		}
	}
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch()}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing header of %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("writing %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing layout tar: %w", err)
	}
	return nil
}

func blobPath(digest string) string {
	return "blobs/sha256/" + digest[len("sha256:"):]
}

// lastTagColon finds the ':' that starts the tag, ignoring one in a registry host:port.
func lastTagColon(ref string) int {
	for i := len(ref) - 1; i >= 0; i-- {
		switch ref[i] {
		case ':':
			return i
		case '/':
			return -1
		}
	}
	return -1
}
