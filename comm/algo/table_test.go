package algo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTable enumerates the algorithm table: every collective of comm.Comm
// has a row; the rows of one name share one ID, and an (op, ID) pair is
// unique; and every algorithm function of the package, a method of *op
// taking a call, has its row: writing an algorithm's file and forgetting
// its row fails here.
func TestTable(t *testing.T) {
	for _, op := range []string{"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather", "scatter", "all_to_all", "barrier"} {
		if len(byOp[op]) == 0 {
			t.Errorf("collective %s has no algorithm", op)
		}
	}
	idOf := map[string]uint8{}
	type key struct {
		op string
		id uint8
	}
	seen := map[key]bool{}
	for _, a := range table {
		if a.Cost == nil || a.run == nil {
			t.Errorf("%s/%s: no cost or run function", a.Op, a.Name)
		}
		if id, ok := idOf[a.Name]; ok && id != a.ID {
			t.Errorf("%s/%s: ID %d, but other rows named %s have %d", a.Op, a.Name, a.ID, a.Name, id)
		}
		idOf[a.Name] = a.ID
		if seen[key{a.Op, a.ID}] {
			t.Errorf("%s: two rows with ID %d", a.Op, a.ID)
		}
		seen[key{a.Op, a.ID}] = true
	}

	// The algorithm functions the package defines, and the ones the
	// table names.
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]string{} // method -> file
	var rows []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if isAlgorithm(d) {
					defined[d.Name.Name] = name
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					vs, ok := s.(*ast.ValueSpec)
					if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "table" {
						continue
					}
					ast.Inspect(vs, func(n ast.Node) bool {
						if se, ok := n.(*ast.SelectorExpr); ok {
							if pe, ok := se.X.(*ast.ParenExpr); ok {
								if st, ok := pe.X.(*ast.StarExpr); ok {
									if id, ok := st.X.(*ast.Ident); ok && id.Name == "op" {
										rows = append(rows, se.Sel.Name)
									}
								}
							}
						}
						return true
					})
				}
			}
		}
	}
	if len(rows) != len(table) {
		t.Fatalf("found %d run functions in the table's source, the table has %d rows", len(rows), len(table))
	}
	inTable := map[string]bool{}
	for _, r := range rows {
		inTable[r] = true
	}
	for m, file := range defined {
		if !inTable[m] {
			t.Errorf("%s (%s) is an algorithm (a method of *op taking a call) with no row in the table (algorithms.go)", m, file)
		}
	}
	if len(defined) < 2 {
		t.Fatalf("found only %d algorithm functions: the scan is broken", len(defined))
	}
}

// isAlgorithm: func (o *op) name(x call) error.
func isAlgorithm(d *ast.FuncDecl) bool {
	if d.Recv == nil || len(d.Recv.List) != 1 || d.Type.Params.NumFields() != 1 || d.Type.Results.NumFields() != 1 {
		return false
	}
	st, ok := d.Recv.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	if id, ok := st.X.(*ast.Ident); !ok || id.Name != "op" {
		return false
	}
	id, ok := d.Type.Params.List[0].Type.(*ast.Ident)
	return ok && id.Name == "call"
}
