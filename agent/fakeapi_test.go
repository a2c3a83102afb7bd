package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeAPIServer is just enough of an API server for nodelet to run against: lists are
// empty, watches stay open without events until the client leaves, created objects
// are stored and read back, and patches answer with the stored object.
type fakeAPIServer struct {
	srv *httptest.Server

	mu      sync.Mutex
	objects map[string][]byte // by path
	count   int
	// traceparents are the W3C traceparent headers the requests carried.
	traceparents []string
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	f := &fakeAPIServer{objects: map[string][]byte{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPIServer) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count
}

// tracedRequests returns the traceparent headers of the requests so far.
func (f *fakeAPIServer) tracedRequests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.traceparents)
}

// kubeconfig writes a kubeconfig for the server (a bearer token: no certificates).
func (f *fakeAPIServer) kubeconfig(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "kubelet.conf")
	if err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+f.srv.URL+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// kinds are the kinds nodelet lists and watches, by resource.
var kinds = map[string]string{"pods": "Pod", "services": "Service", "nodes": "Node", "leases": "Lease", "events": "Event", "runtimeclasses": "RuntimeClass"}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.count++
	if tp := r.Header.Get("traceparent"); tp != "" {
		f.traceparents = append(f.traceparents, tp)
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	path := strings.TrimSuffix(r.URL.Path, "/status")
	switch r.Method {
	case http.MethodGet:
		if obj, ok := f.get(path); ok {
			_, _ = w.Write(obj)
			return
		}
		parts := strings.Split(path, "/")
		kind, ok := kinds[parts[len(parts)-1]]
		if !ok {
			break
		}
		version := strings.Join(parts[2:len(parts)-1], "/") // v1, or coordination.k8s.io/v1/namespaces/x
		if i := strings.Index(version, "/namespaces/"); i >= 0 {
			version = version[:i]
		}
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK)
			if r.URL.Query().Get("sendInitialEvents") == "true" {
				// A watch-list: no objects, then the bookmark that ends the initial events.
				fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind, version)
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		fmt.Fprintf(w, `{"kind":%q,"apiVersion":%q,"metadata":{"resourceVersion":"1"},"items":[]}`, kind+"List", version)
		return
	case http.MethodPost:
		body, _ := io.ReadAll(r.Body)
		var meta struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if json.Unmarshal(body, &meta) == nil && meta.Metadata.Name != "" {
			f.mu.Lock()
			f.objects[path+"/"+meta.Metadata.Name] = body
			f.mu.Unlock()
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
		return
	case http.MethodPatch, http.MethodPut:
		if obj, ok := f.get(path); ok {
			_, _ = w.Write(obj)
			return
		}
	}
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"%s not found"}`, path)
}

func (f *fakeAPIServer) get(path string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	obj, ok := f.objects[path]
	return obj, ok
}
