package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestREADMEDiff: both sides of the README's diff for "your own model"
// (the program before gdist, and after: launch.Main and ddp.Wrap) build
// as shown, against this example's model (newMLP, load, machine): each
// side is added to this package (go build -overlay) with main and train
// renamed, and the package built.
func TestREADMEDiff(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package twice")
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	sec := strings.Index(readme, "## Use gdist with your own model")
	if sec < 0 {
		t.Fatal(`README.md has no "## Use gdist with your own model" section`)
	}
	start := strings.Index(readme[sec:], "```diff\n")
	if start < 0 {
		t.Fatal("the section has no diff")
	}
	body := readme[sec+start+len("```diff\n"):]
	body = body[:strings.Index(body, "```\n")]
	for _, side := range []struct {
		name string
		keep byte // '+' for the new side, '-' for the old
	}{{"new", '+'}, {"old", '-'}} {
		t.Run(side.name, func(t *testing.T) {
			var code strings.Builder
			for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
				switch {
				case line == "":
					code.WriteString("\n")
				case line[0] == ' ' || line[0] == side.keep:
					code.WriteString(strings.TrimPrefix(line[1:], " ") + "\n")
				case line[0] != '+' && line[0] != '-':
					t.Fatalf("diff line %q: want ' ', '+' or '-' first", line)
				}
			}
			src := regexp.MustCompile(`\bmain\(\)`).ReplaceAllString(code.String(), "readmeMain()")
			src = regexp.MustCompile(`\btrain\b`).ReplaceAllString(src, "readmeTrain")
			imports := ""
			for pkg, path := range map[string]string{"context.": "context", "comm.": "github.com/gdist/gdist/comm",
				"ddp.": "github.com/gdist/gdist/ddp", "launch.": "github.com/gdist/gdist/launch", "G.": "gorgonia.org/gorgonia", "log.": "log"} {
				if strings.Contains(src, pkg) {
					name := ""
					if pkg == "G." {
						name = "G "
					}
					imports += "\t" + name + `"` + path + "\"\n"
				}
			}
			file := "package main\n\nimport (\n" + imports + ")\n\nconst (\n\tbatch = 16\n\tseed  = 1\n\tsteps = 10\n)\n\n" + src
			dir := t.TempDir()
			gen := filepath.Join(dir, "readme.go")
			if err := os.WriteFile(gen, []byte(file), 0o644); err != nil {
				t.Fatal(err)
			}
			abs, err := filepath.Abs("zz_readme_diff.go")
			if err != nil {
				t.Fatal(err)
			}
			ov, _ := json.Marshal(map[string]any{"Replace": map[string]string{abs: gen}})
			overlay := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(overlay, ov, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(goTool(t), "build", "-overlay", overlay, "-o", os.DevNull, ".")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the README's diff (%s side) does not build: %v\n%s\n%s", side.name, err, out, file)
			}
		})
	}
}

// goTool is the go command: on PATH, else the toolchain's that built
// this test.
func goTool(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no go command on PATH or at %s: the test builds the README's code with it", p)
	}
	return p
}
