package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The limits docs/development.md ("The shape's limits") promises a
// reader, held on every Go file of the module (tests too; testdata, the
// outside plugin's own module, is not den's code).
const (
	maxMethods         = 50  // methods declared on one type (queue.Store aside)
	maxRoleMethods     = 60  // methods listed in one interface (a role of the store: queue/roles.go)
	maxFunctionLines   = 100 // lines of one function, outside den/cli's command builders
	maxDenFuncFields   = 2   // function-typed struct fields in package den
	minExamples        = 15  // Example functions
	maxDenMutual       = 10  // pairs of files of package den that use each other's top-level names
	maxDenUses         = 80  // (file, file) pairs of package den where one uses the other's names
	maxDenStructFields = 20  // fields of one struct of package den, Config aside
	maxTestSleeps      = 20  // time.Sleep calls in tests (each commented: why no signal serves)
	commandBuildersDir = "den/cli"
)

type goFile struct {
	rel  string // slash-separated path from the module's root
	file *ast.File
}

// moduleFiles parses every Go file of the module.
func moduleFiles(t *testing.T) (*token.FileSet, []goFile) {
	t.Helper()
	fset := token.NewFileSet()
	var files []goFile
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != ".." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel("..", path)
		if err != nil {
			return err
		}
		files = append(files, goFile{filepath.ToSlash(rel), f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d Go files from docs/..; is the test run from docs/?", len(files))
	}
	return fset, files
}

func receiverName(fd *ast.FuncDecl) string {
	e := fd.Recv.List[0].Type
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		e = x.X
	case *ast.IndexListExpr:
		e = x.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}

// No type has more than maxMethods methods, and no interface lists more
// than maxRoleMethods: a type that does everything hides who uses what.
// The one exception is queue.Store, the store every query of den is a
// method of, as asynq's RDB is: who uses what of it is read from the role
// each caller holds (queue/roles.go, TestEachPackageHoldsOneRole).
func TestNoTypeHasTooManyMethods(t *testing.T) {
	_, files := moduleFiles(t)
	methods := map[string]int{}
	listed := map[string]int{}
	for _, f := range files {
		dir := filepath.Dir(f.rel)
		for _, d := range f.file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil {
					methods[dir+"."+receiverName(d)]++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						if it, ok := ts.Type.(*ast.InterfaceType); ok {
							listed[dir+"."+ts.Name.Name] += len(it.Methods.List)
						}
					}
				}
			}
		}
	}
	if methods["queue.Store"] == 0 {
		t.Fatal("no methods of queue.Store found: is the store still named so?")
	}
	for typ, n := range methods {
		if n > maxMethods && typ != "queue.Store" {
			t.Errorf("%s has %d methods, over %d", typ, n, maxMethods)
		}
	}
	for typ, n := range listed {
		if n > maxRoleMethods {
			t.Errorf("interface %s lists %d methods, over %d", typ, n, maxRoleMethods)
		}
	}
}

// Each package outside queue holds the store as one role (queue/roles.go),
// the archive's reader aside (it reads another collection, and changes
// nothing): never the concrete queue.Store, which only queue.NewStore
// makes, and never two of the node's, the runner's and the operators'.
func TestEachPackageHoldsOneRole(t *testing.T) {
	_, files := moduleFiles(t)
	roles := map[string]bool{"NodeStore": true, "RunnerStore": true, "OperatorStore": true}
	held := map[string]map[string]bool{}
	for _, f := range files {
		dir := filepath.Dir(f.rel)
		if dir == "queue" || strings.HasSuffix(f.rel, "_test.go") {
			continue
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "queue" {
				return true
			}
			switch name := sel.Sel.Name; {
			case name == "Store":
				t.Errorf("%s: holds the concrete queue.Store; hold the role it plays (queue/roles.go)", f.rel)
			case roles[name]:
				if held[dir] == nil {
					held[dir] = map[string]bool{}
				}
				held[dir][name] = true
			}
			return true
		})
	}
	if len(held) == 0 {
		t.Fatal("no package outside queue holds a role: are the roles still named so?")
	}
	for dir, rs := range held {
		if len(rs) > 1 {
			t.Errorf("package %s holds %d roles of the store (%v); one each", dir, len(rs), rs)
		}
	}
}

// No function outside den/cli is over maxFunctionLines lines; cobra's
// command builders there are declarations, long by nature.
func TestNoFunctionTooLong(t *testing.T) {
	fset, files := moduleFiles(t)
	for _, f := range files {
		if strings.HasPrefix(f.rel, commandBuildersDir+"/") {
			continue
		}
		for _, d := range f.file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if lines > maxFunctionLines {
				t.Errorf("%s: %s is %d lines, over %d", f.rel, fd.Name.Name, lines, maxFunctionLines)
			}
		}
	}
}

// Package den wires its components by what each is given, not by
// functions set after construction: at most maxDenFuncFields struct
// fields of a function type (a named function type counts).
func TestDenHasFewFunctionFields(t *testing.T) {
	_, files := moduleFiles(t)
	funcTypes := map[string]bool{}
	var den []*ast.File
	for _, f := range files {
		if filepath.Dir(f.rel) != "den" || strings.HasSuffix(f.rel, "_test.go") {
			continue
		}
		den = append(den, f.file)
		for _, d := range f.file.Decls {
			if gd, ok := d.(*ast.GenDecl); ok {
				for _, s := range gd.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						if _, ok := ts.Type.(*ast.FuncType); ok {
							funcTypes[ts.Name.Name] = true
						}
					}
				}
			}
		}
	}
	var found []string
	for _, f := range den {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, field := range st.Fields.List {
				isFunc := false
				switch ft := field.Type.(type) {
				case *ast.FuncType:
					isFunc = true
				case *ast.Ident:
					isFunc = funcTypes[ft.Name]
				}
				if !isFunc {
					continue
				}
				names := []string{"(embedded)"}
				if len(field.Names) > 0 {
					names = names[:0]
					for _, n := range field.Names {
						names = append(names, n.Name)
					}
				}
				for _, n := range names {
					found = append(found, ts.Name.Name+"."+n)
				}
			}
			return true
		})
	}
	if len(found) > maxDenFuncFields {
		t.Errorf("package den has %d function-typed struct fields, over %d: %s", len(found), maxDenFuncFields, strings.Join(found, ", "))
	}
}

// The runner's two processes live in two packages: no package holds
// both the supervisor's files and the worker's.
func TestSupervisorAndWorkerApart(t *testing.T) {
	_, files := moduleFiles(t)
	supervisor, worker := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		base := filepath.Base(f.rel)
		switch {
		case strings.HasPrefix(base, "supervisor"):
			supervisor[filepath.Dir(f.rel)] = true
		case strings.HasPrefix(base, "worker"):
			worker[filepath.Dir(f.rel)] = true
		}
	}
	for dir := range supervisor {
		if worker[dir] {
			t.Errorf("%s holds both supervisor*.go and worker*.go files", dir)
		}
	}
}

var example = regexp.MustCompile(`^Example`)

// Each feature has a runnable Example (go doc shows it; go test runs it).
func TestEnoughExamples(t *testing.T) {
	_, files := moduleFiles(t)
	n := 0
	for _, f := range files {
		if !strings.HasSuffix(f.rel, "_test.go") {
			continue
		}
		for _, d := range f.file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && example.MatchString(fd.Name.Name) {
				n++
			}
		}
	}
	if n < minExamples {
		t.Errorf("%d Example functions, want at least %d", n, minExamples)
	}
}

// den's root package stays as untangled as River's and asynq's roots
// (../shared/shape counts them the same way): its components are
// packages of their own (den/internal/...), and what stays (the node,
// its configuration, the loop's passes and the housekeeping's steps) uses
// few of its own files' names. A file uses another when it names one of
// the other's top-level declarations, or calls a method only the other
// declares; a pair that uses each other both ways is mutual.
func TestDenRootUntangled(t *testing.T) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob("../den/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0) // with object resolution: locals are not uses
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = f
	}
	owner := map[string]string{}            // top-level name: its file
	methods := map[string]map[string]bool{} // method name: the files declaring one
	for name, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					owner[d.Name.Name] = name
					continue
				}
				if methods[d.Name.Name] == nil {
					methods[d.Name.Name] = map[string]bool{}
				}
				methods[d.Name.Name][name] = true
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						owner[sp.Name.Name] = name
						if st, ok := sp.Type.(*ast.StructType); ok && sp.Name.Name != "Config" {
							n := 0
							for _, fl := range st.Fields.List {
								n += max(len(fl.Names), 1)
							}
							if n > maxDenStructFields {
								t.Errorf("den.%s has %d fields, over %d", sp.Name.Name, n, maxDenStructFields)
							}
						}
					case *ast.ValueSpec:
						for _, id := range sp.Names {
							owner[id.Name] = name
						}
					}
				}
			}
		}
	}
	uses := map[[2]string]bool{}
	for name, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if fs := methods[n.Sel.Name]; len(fs) == 1 {
					for o := range fs {
						if o != name {
							uses[[2]string{name, o}] = true
						}
					}
				}
			case *ast.Ident:
				if o, ok := owner[n.Name]; ok && o != name && n.Obj == nil {
					uses[[2]string{name, o}] = true
				}
			}
			return true
		})
	}
	var mutual []string
	for k := range uses {
		if k[0] < k[1] && uses[[2]string{k[1], k[0]}] {
			mutual = append(mutual, k[0]+" <-> "+k[1])
		}
	}
	if len(uses) > maxDenUses {
		t.Errorf("den's %d files use each other's names %d times (file pairs), over %d", len(files), len(uses), maxDenUses)
	}
	if len(mutual) > maxDenMutual {
		t.Errorf("%d pairs of den's files use each other, over %d: %s", len(mutual), maxDenMutual, strings.Join(mutual, ", "))
	}
	t.Logf("den: %d files, %d one-way file uses, %d mutual pairs", len(files), len(uses), len(mutual))
}

// Tests wait on what they wait for (test signals, dentest.Until and
// WaitStatus), not on the clock: at most maxTestSleeps time.Sleep calls
// stay in test files, where time itself is the point.
func TestFewSleepsInTests(t *testing.T) {
	_, files := moduleFiles(t)
	var at []string
	for _, f := range files {
		if !strings.HasSuffix(f.rel, "_test.go") {
			continue
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sleep" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" {
					at = append(at, f.rel)
				}
			}
			return true
		})
	}
	if len(at) > maxTestSleeps {
		t.Errorf("%d time.Sleep calls in tests, over %d: %s", len(at), maxTestSleeps, strings.Join(at, ", "))
	}
}
