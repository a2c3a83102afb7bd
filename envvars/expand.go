package envvars

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Expand replaces $(VAR) references in s using lookup, with the documented
// Kubernetes rules: `$$` becomes `$`; a reference to an unknown variable,
// an unterminated `$(`, and a `$` followed by anything else are kept as
// written.
func Expand(s string, lookup func(name string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unterminated: keep "$(" and carry on after it.
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
			b.WriteByte(next)
			i++
		}
	}
	return b.String()
}

// ExpandCommand expands $(VAR) references in a container's command or args
// from its resolved environment env, as upstream does before creating the
// container: the same rules as Expand, a reference to a variable env does not
// hold is kept as written. A nil or empty list stays as it is, so the image's
// entrypoint and cmd still apply.
func ExpandCommand(list []string, env []*runtimeapi.KeyValue) []string {
	if len(list) == 0 {
		return list
	}
	values := make(map[string]string, len(env))
	for _, kv := range env {
		values[kv.GetKey()] = string(kv.GetValue())
	}
	lookup := func(name string) (string, bool) {
		v, ok := values[name]
		return v, ok
	}
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = Expand(s, lookup)
	}
	return out
}
