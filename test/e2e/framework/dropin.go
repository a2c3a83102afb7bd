package framework

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// DropIn is what a systemd unit or drop-in says about a service's command line: its
// Environment= assignments, EnvironmentFile= files and last ExecStart=. Tests use it to start
// a node agent exactly as a unit would (the host has no systemd).
type DropIn struct {
	Env       [][2]string // Environment= assignments, in order
	EnvFiles  []string    // EnvironmentFile= paths, a leading "-" (missing is fine) kept
	ExecStart string      // the last non-empty ExecStart= ("ExecStart=" alone resets it)
}

// ParseDropIn reads the [Service] settings of a unit file or drop-in that make the command
// line. Other keys are ignored; continuation lines are not handled (an error).
func ParseDropIn(text string) (*DropIn, error) {
	d := &DropIn{}
	for n, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") || strings.HasPrefix(line, "[") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			return nil, fmt.Errorf("line %d: continuation lines are not handled: %q", n+1, line)
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not Key=value", n+1, line)
		}
		switch strings.TrimSpace(k) {
		case "Environment":
			words, err := splitSystemdWords(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			for _, w := range words {
				name, val, ok := strings.Cut(w, "=")
				if !ok || name == "" {
					return nil, fmt.Errorf("line %d: Environment= %q is not NAME=value", n+1, w)
				}
				d.Env = append(d.Env, [2]string{name, val})
			}
		case "EnvironmentFile":
			if v = strings.TrimSpace(v); v == "" {
				d.EnvFiles = nil
			} else {
				d.EnvFiles = append(d.EnvFiles, v)
			}
		case "ExecStart":
			d.ExecStart = strings.TrimSpace(v)
		}
	}
	if d.ExecStart == "" {
		return nil, errors.New("no ExecStart")
	}
	return d, nil
}

// splitSystemdWords splits an Environment= value into words: whitespace separates them,
// double or single quotes group (and are removed).
func splitSystemdWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	var quote rune
	have := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '"' || r == '\''):
			quote, have = r, true
		case quote == 0 && (r == ' ' || r == '\t'):
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if have {
		out = append(out, cur.String())
	}
	return out, nil
}

// ReadEnvFile reads a systemd EnvironmentFile: NAME=value lines, '#' and ';' comments, a value
// in double or single quotes taken without them.
func ReadEnvFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for n, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%s:%d: %q is not NAME=value", path, n+1, line)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[strings.TrimSpace(k)] = v
	}
	return env, nil
}

// CommandLine is ExecStart expanded as systemd expands it for the forms kubelet drop-ins
// use, with the environment read now: Environment= first, then each EnvironmentFile= (later
// ones win; a missing "-" file is skipped). A word "$NAME" becomes the variable's
// whitespace-separated words (none when unset or empty); the first word, the binary, becomes
// bin. It returns the argv and the environment. Quoting, "${NAME}" and "$NAME" inside a word
// are refused rather than guessed at.
func (d *DropIn) CommandLine(bin string) ([]string, map[string]string, error) {
	env := map[string]string{}
	for _, kv := range d.Env {
		env[kv[0]] = kv[1]
	}
	for _, ef := range d.EnvFiles {
		path, optional := strings.CutPrefix(ef, "-")
		vars, err := ReadEnvFile(path)
		if optional && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		for k, v := range vars {
			env[k] = v
		}
	}
	if strings.ContainsAny(d.ExecStart, "\"'\\;") {
		return nil, nil, fmt.Errorf("ExecStart %q: quoting, escapes and ';' are not handled", d.ExecStart)
	}
	words := strings.Fields(d.ExecStart)
	if strings.ContainsAny(words[0][:1], "@-+!:|") || strings.Contains(words[0], "$") {
		return nil, nil, fmt.Errorf("ExecStart %q: prefixes and variables in the binary are not handled", d.ExecStart)
	}
	args := []string{bin}
	for _, w := range words[1:] {
		if name, ok := strings.CutPrefix(w, "$"); ok && name != "" && !strings.ContainsAny(name, "${}") {
			args = append(args, strings.Fields(env[name])...)
			continue
		}
		if strings.Contains(w, "$") {
			return nil, nil, fmt.Errorf("ExecStart word %q: only a whole-word $NAME is handled", w)
		}
		args = append(args, w)
	}
	return args, env, nil
}
