package data

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestTextCorpus(t *testing.T) {
	dir := t.TempDir()
	for i, s := range []string{"package a\n\nfunc A() {}\n", "package b\n\nvar B = 1\n", "not go"} {
		name := filepath.Join(dir, []string{"a.go", "sub/b.go", "c.txt"}[i])
		os.MkdirAll(filepath.Dir(name), 0o755)
		if err := os.WriteFile(name, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Which of the two .go files is held out depends on the hash; a
	// corpus needs both splits, so use many files.
	for i := 0; i < 60; i++ {
		os.WriteFile(filepath.Join(dir, "sub", string(rune('c'+i%20))+string(rune('a'+i/20))+".go"), []byte("package x // filler text\n"), 0o644)
	}
	tx, err := LoadText(dir, ".go", 8)
	if err != nil {
		t.Fatal(err)
	}
	if tx.Files != 62 {
		t.Errorf("read %d files, want the 62 .go files", tx.Files)
	}
	again, _ := LoadText(dir, ".go", 8)
	if string(again.Train) != string(tx.Train) || string(again.Test) != string(tx.Test) {
		t.Error("the split differs between two loads")
	}
	n := tx.Windows(false)
	x := make([]float32, 2*8)
	y := make([]int32, 2*8)
	if err := tx.Batch(false, []int{0, n - 1}, x, y); err != nil {
		t.Fatal(err)
	}
	for k, i := range []int{0, n - 1} {
		for j := 0; j < 8; j++ {
			if byte(x[k*8+j]) != tx.Train[i*8+j] || byte(y[k*8+j]) != tx.Train[i*8+j+1] {
				t.Fatalf("window %d position %d: input %v label %v", i, j, x[k*8+j], y[k*8+j])
			}
		}
	}
	if err := tx.Batch(false, []int{n}, x, y); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("window past the end: %v", err)
	}
	if b := tx.UnigramBits(); b <= 0 || b > 8 {
		t.Errorf("unigram bits per byte %v", b)
	}
	if _, err := LoadText(filepath.Join(dir, "missing"), "", 8); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing corpus: %v", err)
	}
}

// TestGoCorpus: the default corpus is the Go source tree, whose unigram
// entropy is about 5.5 bits per byte.
func TestGoCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("reads ~90 MB")
	}
	tx, err := LoadText(DefaultCorpus(), ".go", 64)
	if err != nil {
		t.Skipf("the Go source tree is not readable here (set GOROOT): %v", err)
	}
	b := tx.UnigramBits()
	t.Logf("%d files, %d training and %d held-out bytes, unigram %.3f bits/byte", tx.Files, len(tx.Train), len(tx.Test), b)
	if b < 5 || b > 6 || len(tx.Test) < len(tx.Train)/40 {
		t.Errorf("unigram %.3f bits per byte, held out %d of %d bytes", b, len(tx.Test), len(tx.Train))
	}
}
