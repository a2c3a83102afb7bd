package eventsdoc

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/nodelet/nodelet"

// recorderArg is the index of the reason argument of client-go's
// record.EventRecorder methods.
var recorderArg = map[string]int{"Event": 2, "Eventf": 2, "AnnotatedEventf": 3}

// pkgInfo is one product package, parsed.
type pkgInfo struct {
	dir    string
	files  []*ast.File
	consts map[string]ast.Expr // package-level constants
	// funcs are the functions and methods, and the function literals assigned
	// to a name, by name: a parameter is resolved through their call sites.
	funcs map[string][]*ast.FuncType
}

// module is the product source: every package outside test/, bench/ and
// testdata, without _test.go files.
type moduleSrc struct {
	fset *token.FileSet
	pkgs map[string]*pkgInfo // by directory relative to the root
}

func loadModule(t *testing.T, root string) *moduleSrc {
	t.Helper()
	m := &moduleSrc{fset: token.NewFileSet(), pkgs: map[string]*pkgInfo{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || rel == "test" || rel == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(m.fset, path, nil, 0)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", rel, err)
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		p := m.pkgs[dir]
		if p == nil {
			p = &pkgInfo{dir: dir, consts: map[string]ast.Expr{}, funcs: map[string][]*ast.FuncType{}}
			m.pkgs[dir] = p
		}
		p.files = append(p.files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.pkgs {
		for _, f := range p.files {
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.GenDecl:
					if d.Tok != token.CONST {
						continue
					}
					for _, s := range d.Specs {
						vs := s.(*ast.ValueSpec)
						for i, n := range vs.Names {
							if i < len(vs.Values) {
								p.consts[n.Name] = vs.Values[i]
							}
						}
					}
				case *ast.FuncDecl:
					p.funcs[d.Name.Name] = append(p.funcs[d.Name.Name], d.Type)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == len(as.Rhs) {
					for i, r := range as.Rhs {
						if fl, ok := r.(*ast.FuncLit); ok {
							if id, ok := as.Lhs[i].(*ast.Ident); ok {
								p.funcs[id.Name] = append(p.funcs[id.Name], fl.Type)
							}
						}
					}
				}
				return true
			})
		}
	}
	return m
}

// site is a recorder call in product source.
type site struct {
	pos     token.Position
	reasons []string // a trailing "*" is any suffix
	err     string   // why the reason could not be resolved
}

// resolver finds the string values an expression can have, by reading the
// source: literals, constants (in the package or another of the module), local
// variables, parameters (through the callers in the package), and fields of
// the module's own struct types (through their composite literals).
type resolver struct {
	m       *moduleSrc
	visited map[ast.Node]bool
}

func (r *resolver) resolve(p *pkgInfo, f *ast.File, stack []ast.Node, e ast.Expr) ([]string, error) {
	if r.visited[e] {
		return nil, nil
	}
	r.visited[e] = true
	defer delete(r.visited, e)
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return []string{s}, err
		}
	case *ast.ParenExpr:
		return r.resolve(p, f, stack, e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			break
		}
		left, err := r.resolve(p, f, stack, e.X)
		if err != nil {
			return nil, err
		}
		right, err := r.resolve(p, f, stack, e.Y)
		if err != nil || len(right) == 0 {
			right = []string{"*"} // not a constant: any suffix
		}
		var out []string
		for _, a := range left {
			for _, b := range right {
				out = append(out, a+b)
			}
		}
		return out, nil
	case *ast.Ident:
		return r.ident(p, f, stack, e)
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			if imp := importPath(f, x.Name); imp != "" {
				dir, ok := strings.CutPrefix(imp, module+"/")
				q := r.m.pkgs[dir]
				if !ok || q == nil || q.consts[e.Sel.Name] == nil {
					return nil, fmt.Errorf("%s.%s is not a constant of the module", x.Name, e.Sel.Name)
				}
				return r.resolveIn(q, q.consts[e.Sel.Name])
			}
		}
		key := p.dir + " " + exprString(e)
		types, ok := fieldTypes[key]
		if !ok {
			return nil, fmt.Errorf("field %s: add the struct types it is set in to fieldTypes", key)
		}
		return r.field(types, e.Sel.Name)
	}
	return nil, fmt.Errorf("cannot resolve %T", e)
}

// resolveIn resolves a package-level expression of p.
func (r *resolver) resolveIn(p *pkgInfo, e ast.Expr) ([]string, error) {
	for _, f := range p.files {
		if f.Pos() <= e.Pos() && e.End() <= f.End() {
			return r.resolve(p, f, nil, e)
		}
	}
	return nil, fmt.Errorf("no file of %s holds the expression", p.dir)
}

func (r *resolver) ident(p *pkgInfo, f *ast.File, stack []ast.Node, id *ast.Ident) ([]string, error) {
	// Innermost function first: its parameters, then its assignments.
	for i := len(stack) - 1; i >= 0; i-- {
		var ft *ast.FuncType
		var body *ast.BlockStmt
		switch fn := stack[i].(type) {
		case *ast.FuncDecl:
			ft, body = fn.Type, fn.Body
		case *ast.FuncLit:
			ft, body = fn.Type, fn.Body
		default:
			continue
		}
		if idx := paramIndex(ft, id.Name); idx >= 0 {
			return r.param(p, ft, idx)
		}
		var out []string
		found := false
		var firstErr error
		ast.Inspect(body, func(n ast.Node) bool {
			switch s := n.(type) {
			case *ast.AssignStmt:
				if len(s.Lhs) != len(s.Rhs) {
					return true
				}
				for j, l := range s.Lhs {
					if li, ok := l.(*ast.Ident); ok && li.Name == id.Name {
						found = true
						vs, err := r.resolve(p, f, stack[:i+1], s.Rhs[j])
						if err != nil && firstErr == nil {
							firstErr = err
						}
						out = append(out, vs...)
					}
				}
			case *ast.ValueSpec:
				for j, n := range s.Names {
					if n.Name == id.Name && j < len(s.Values) {
						found = true
						vs, err := r.resolve(p, f, stack[:i+1], s.Values[j])
						if err != nil && firstErr == nil {
							firstErr = err
						}
						out = append(out, vs...)
					}
				}
			}
			return true
		})
		if found {
			return out, firstErr
		}
	}
	if c := p.consts[id.Name]; c != nil {
		return r.resolveIn(p, c)
	}
	return nil, fmt.Errorf("%s is neither a constant, a local variable nor a parameter", id.Name)
}

func paramIndex(ft *ast.FuncType, name string) int {
	i := 0
	for _, fld := range ft.Params.List {
		if len(fld.Names) == 0 {
			i++
			continue
		}
		for _, n := range fld.Names {
			if n.Name == name {
				return i
			}
			i++
		}
	}
	return -1
}

// param resolves parameter idx of the function typed ft through every call of
// a function of that name in the package.
func (r *resolver) param(p *pkgInfo, ft *ast.FuncType, idx int) ([]string, error) {
	var name string
	for n, fts := range p.funcs {
		if slices.Contains(fts, ft) {
			name = n
		}
	}
	if name == "" {
		return nil, fmt.Errorf("a parameter of an unnamed function")
	}
	var out []string
	var firstErr error
	calls := 0
	for _, f := range p.files {
		walk(f, func(stack []ast.Node, n ast.Node) {
			call, ok := n.(*ast.CallExpr)
			if !ok || calleeName(call) != name || idx >= len(call.Args) {
				return
			}
			calls++
			vs, err := r.resolve(p, f, stack, call.Args[idx])
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", r.m.fset.Position(call.Pos()), err)
			}
			out = append(out, vs...)
		})
	}
	if calls == 0 {
		return nil, fmt.Errorf("no call of %s in %s", name, p.dir)
	}
	return out, firstErr
}

// fieldTypes says, for a field selected in a package ("dir x.Field"), which of
// the module's struct types x is: the values come from their composite literals.
// A table, as go/ast has no types and go/types would have to load all of
// client-go.
var fieldTypes = map[string][]string{
	"syncloop rej.Reason":  {"Rejection"},      // admission rejections
	"syncloop u.predicate": {"unfit"},          // the scheduler filter that failed
	"agent r.Reason":       {"AdmitResult"},    // eviction's admission under pressure
	"node ev.reason":       {"conditionEvent"}, // node condition transitions
}

func exprString(e ast.Expr) string {
	if s, ok := e.(*ast.SelectorExpr); ok {
		return exprString(s.X) + "." + s.Sel.Name
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return fmt.Sprintf("%T", e)
}

// field resolves field name of the module's struct types named types through
// the composite literals that set it.
func (r *resolver) field(types []string, name string) ([]string, error) {
	var out []string
	var firstErr error
	for _, p := range r.m.pkgs {
		for _, f := range p.files {
			walk(f, func(stack []ast.Node, n ast.Node) {
				cl, ok := n.(*ast.CompositeLit)
				if !ok || !slices.Contains(types, localType(f, cl.Type)) {
					return
				}
				for _, el := range cl.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					if k, ok := kv.Key.(*ast.Ident); !ok || k.Name != name {
						continue
					}
					vs, err := r.resolve(p, f, stack, kv.Value)
					if err != nil && firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", r.m.fset.Position(kv.Pos()), err)
					}
					out = append(out, vs...)
				}
			})
		}
	}
	if len(out) == 0 && firstErr == nil {
		firstErr = fmt.Errorf("no composite literal of %v sets field %s", types, name)
	}
	return out, firstErr
}

// localType is the name of the module's type t, "" for another module's.
func localType(f *ast.File, t ast.Expr) string {
	switch t := t.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.SelectorExpr:
		if x, ok := t.X.(*ast.Ident); ok && strings.HasPrefix(importPath(f, x.Name), module+"/") {
			return t.Sel.Name
		}
	}
	return ""
}

func calleeName(call *ast.CallExpr) string {
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return fn.Name
	case *ast.SelectorExpr:
		return fn.Sel.Name
	}
	return ""
}

// importPath is the path file f imports as name, "" if none.
func importPath(f *ast.File, name string) string {
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		local := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			local = imp.Name.Name
		}
		if local == name {
			return path
		}
	}
	return ""
}

// walk calls fn on every node of f with its ancestors.
func walk(f *ast.File, fn func(stack []ast.Node, n ast.Node)) {
	var stack []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		fn(stack, n)
		stack = append(stack, n)
		return true
	})
}

// recorderSites finds every call of a recorder method and resolves its reason.
func recorderSites(m *moduleSrc) []site {
	var sites []site
	for _, p := range m.pkgs {
		for _, f := range p.files {
			walk(f, func(stack []ast.Node, n ast.Node) {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return
				}
				idx, ok := recorderArg[sel.Sel.Name]
				if !ok || len(call.Args) < idx+2 {
					return
				}
				r := &resolver{m: m, visited: map[ast.Node]bool{}}
				s := site{pos: m.fset.Position(call.Pos())}
				vs, err := r.resolve(p, f, stack, call.Args[idx])
				if err != nil {
					s.err = err.Error()
				}
				slices.Sort(vs)
				s.reasons = slices.Compact(vs)
				sites = append(sites, s)
			})
		}
	}
	return sites
}

// docReasons reads the reasons, in backquotes in the first column, of the
// tables of the section of docs/events.md whose heading starts with heading.
// "OutOf<resource>" is returned as "OutOf*".
func docReasons(t *testing.T, path, heading string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tick := regexp.MustCompile("`([^`]+)`")
	var out []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.HasPrefix(line, "## "+heading)
			continue
		}
		if !in || !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|-") || strings.HasPrefix(line, "| Reason") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		for _, m := range tick.FindAllStringSubmatch(cell, -1) {
			r := m[1]
			if i := strings.Index(r, "<"); i >= 0 {
				r = r[:i] + "*"
			}
			out = append(out, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no reason in section %q", path, heading)
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root: %v", err)
	}
	return root
}

const (
	emittedHeading = "Events nodelet records"
	missingHeading = "Upstream events nodelet does not record"
)

// Every event reason product code can record is in docs/events.md, every
// reason the doc lists is one product code records, and none of the upstream
// reasons the doc says nodelet lacks is recorded.
func TestEventsDoc(t *testing.T) {
	root := repoRoot(t)
	sites := recorderSites(loadModule(t, root))
	if len(sites) < 20 {
		t.Fatalf("found only %d recorder calls: the search is broken", len(sites))
	}
	doc := filepath.Join(root, "docs", "events.md")
	documented := docReasons(t, doc, emittedHeading)
	absent := docReasons(t, doc, missingHeading)

	emitted := map[string]bool{}
	for _, s := range sites {
		if s.err != "" || len(s.reasons) == 0 {
			t.Errorf("%s: the event reason cannot be read from the source (%s): make it a literal or constant", s.pos, s.err)
		}
		for _, r := range s.reasons {
			emitted[r] = true
			if !slices.Contains(documented, r) {
				t.Errorf("%s: event reason %q is not in docs/events.md (section %q)", s.pos, r, emittedHeading)
			}
		}
	}
	// A reason built at run time ("OutOf" + the resource) covers the reasons
	// the doc names as its examples (OutOfcpu).
	recorded := func(r string) bool {
		for e := range emitted {
			if e == r || strings.HasSuffix(e, "*") && strings.HasPrefix(r, strings.TrimSuffix(e, "*")) {
				return true
			}
		}
		return false
	}
	for _, r := range documented {
		if !recorded(r) {
			t.Errorf("docs/events.md lists reason %q, which no recorder call in product source records", r)
		}
	}
	for _, r := range absent {
		if recorded(r) {
			t.Errorf("docs/events.md says nodelet does not record %q, but product source does", r)
		}
	}
}
