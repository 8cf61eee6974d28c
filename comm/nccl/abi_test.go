package nccl

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestABITable checks that the C code takes its NCCL values from the table
// in abi.go: the shim's constants and the fake NCCL's enums
// (gpu/cudafake), and that the version encoding follows NCCL_VERSION.
func TestABITable(t *testing.T) {
	want := map[string]int{}
	for _, f := range abiTable {
		want[f.name] = f.value
	}
	check := func(file, pattern string) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(string(src), -1) {
			v, _ := strconv.Atoi(m[2])
			w, ok := want[m[1]]
			if !ok {
				t.Errorf("%s: %s = %d is not in abi.go's table", file, m[1], v)
				continue
			}
			if v != w {
				t.Errorf("%s: %s = %d, but nccl.h.in says %d (%q)", file, m[1], v, w, lineOf(m[1]))
			}
			n++
		}
		if n == 0 {
			t.Errorf("%s: no NCCL values found", file)
		}
	}
	check("shim.h", `gdnc_(nccl\w+) = (\d+)`)
	check("../../gpu/cudafake/testdata/fakecuda.c", `\b(nccl(?:Success|UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError|InProgress)) = (\d+)`)
	// The fake's datatype and op enums are named tXxx and oXxx.
	src, err := os.ReadFile("../../gpu/cudafake/testdata/fakecuda.c")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\b([to])(Int8|Uint8|Int32|Uint32|Int64|Uint64|Float16|Float32|Float64|Bfloat16|Sum|Prod|Max|Min|Avg) = (\d+)`).FindAllStringSubmatch(string(src), -1) {
		v, _ := strconv.Atoi(m[3])
		if w := want["nccl"+m[2]]; v != w {
			t.Errorf("fakecuda.c: %s%s = %d, nccl.h.in says %d", m[1], m[2], v, w)
		}
	}
	for _, c := range []struct {
		code                int
		major, minor, patch int
	}{{2708, 2, 7, 8}, {2804, 2, 8, 4}, {20906, 2, 9, 6}, {21903, 2, 19, 3}, {22703, 2, 27, 3}} {
		a, b, p := parseVersion(c.code)
		if a != c.major || b != c.minor || p != c.patch {
			t.Errorf("parseVersion(%d) = %d.%d.%d, want %d.%d.%d", c.code, a, b, p, c.major, c.minor, c.patch)
		}
		// NCCL_VERSION(X,Y,Z) encodes it back.
		enc := a*10000 + b*100 + p
		if a <= 2 && b <= 8 {
			enc = a*1000 + b*100 + p
		}
		if enc != c.code {
			t.Errorf("NCCL_VERSION(%d,%d,%d) = %d, want %d", a, b, p, enc, c.code)
		}
	}
}

func lineOf(name string) string {
	for _, f := range abiTable {
		if f.name == name {
			return f.line
		}
	}
	return ""
}
