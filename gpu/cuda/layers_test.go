package cuda_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// gpu/cuda sits below comm (ARCHITECTURE.md: nothing points upward): it
// imports no package of gdist but internal ones. comm.Buffers over device
// memory are comm/staging's (NewBuffer, Copy, ...).
func TestImportsNothingAbove(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, "github.com/gdist/gdist/") && !strings.HasPrefix(p, "github.com/gdist/gdist/internal/") {
				t.Errorf("%s imports %s: gpu/cuda must not import packages above it", f, p)
			}
		}
	}
}
