package readme

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLink(t *testing.T) {
	for _, c := range []struct{ doc, file, want string }{
		{"benchmarks/NOTES.md", "benchmarks/results/peer_allreduce_w2.png", "results/peer_allreduce_w2.png"},
		{"benchmarks/README.md", "benchmarks/results/x.png", "results/x.png"},
		{"benchmarks/NOTES.md", "/tmp/x/peer_allreduce_w2.png", "/tmp/x/peer_allreduce_w2.png"},
		{"/tmp/notes.md", "/tmp/x/a.png", "x/a.png"},
		{"", "benchmarks/results/a.png", "benchmarks/results/a.png"},
	} {
		if got := Link(c.doc, c.file); got != c.want {
			t.Errorf("Link(%q, %q) = %q, want %q", c.doc, c.file, got, c.want)
		}
	}
}

func TestRewrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "NOTES.md")
	if err := os.WriteFile(p, []byte("a\n<!-- s:begin -->\nold\n<!-- s:end -->\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Rewrite(p, "s", "new"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if want := "a\n<!-- s:begin -->\nnew\n<!-- s:end -->\nb\n"; string(b) != want {
		t.Errorf("got %q, want %q", b, want)
	}
	if err := Rewrite(p, "missing", "x"); err == nil {
		t.Error("a missing section: no error")
	}
}
