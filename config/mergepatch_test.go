package config

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The cases are the examples of RFC 7386 appendix A.
func TestMergePatchRFC7386(t *testing.T) {
	tests := []struct {
		doc, patch, want string
	}{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`["a","b"]`, `["c","d"]`, `["c","d"]`},
		{`{"a":"b"}`, `["c"]`, `["c"]`},
		{`{"a":"foo"}`, `null`, `null`},
		{`{"a":"foo"}`, `"bar"`, `"bar"`},
		{`{"e":null}`, `{"a":1}`, `{"e":null,"a":1}`},
		{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
		// Explicit zero values are values, not deletions.
		{`{"port":10250,"x":{"y":"1m"}}`, `{"port":0,"x":{"y":"0s"}}`, `{"port":0,"x":{"y":"0s"}}`},
	}
	for _, tc := range tests {
		got, err := mergePatch([]byte(tc.doc), []byte(tc.patch))
		if err != nil {
			t.Fatalf("mergePatch(%s, %s): %v", tc.doc, tc.patch, err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(tc.want), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("mergePatch(%s, %s) = %s, want %s", tc.doc, tc.patch, got, tc.want)
		}
	}
}

func TestMergePatchInvalid(t *testing.T) {
	if _, err := mergePatch([]byte(`{}`), []byte(`{`)); err == nil {
		t.Error("want error for malformed patch")
	}
	if _, err := mergePatch([]byte(`{`), []byte(`{}`)); err == nil {
		t.Error("want error for malformed target")
	}
}
