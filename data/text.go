package data

import (
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Text is a byte-level text corpus split into training and held-out
// bytes, served as windows of Context+1 bytes: a sample's input is
// Context bytes (as float32 byte values), its labels the Context bytes
// that follow each of them. Window i starts at byte i*Context, so the
// samples of an epoch cover the split once; the Sampler orders them. A
// Text is read-only once built and safe for concurrent use.
type Text struct {
	Name    string
	Context int
	Train   []byte
	Test    []byte
	Files   int // files read
}

// DefaultCorpus is the Go standard library's source, present wherever Go
// builds: $(go env GOROOT)/src.
func DefaultCorpus() string { return filepath.Join(goroot(), "src") }

func goroot() string {
	if r := os.Getenv("GOROOT"); r != "" {
		return r
	}
	for _, r := range []string{"/usr/local/go", "/usr/lib/go"} {
		if _, err := os.Stat(filepath.Join(r, "src")); err == nil {
			return r
		}
	}
	return "/usr/local/go"
}

// heldOut says whether the file at rel (slash-separated, relative to the
// corpus root) is held out: 1 file in 20, chosen by a hash of its path,
// the same on every machine.
func heldOut(rel string) bool {
	h := fnv.New32a()
	h.Write([]byte(rel))
	return h.Sum32()%20 == 0
}

// LoadText reads path, a text file or a directory (every *.go file below
// it when ext is ".go"; every regular file when ext is ""), and splits it
// into training and held-out bytes by file (a single file: its last 5%
// is held out). Files are read in path order, so every machine builds
// the same corpus.
func LoadText(path, ext string, context int) (*Text, error) {
	if context < 1 {
		return nil, fmt.Errorf("%w: text context %d < 1", ErrInvalidArgument, context)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: text corpus %s: %v", ErrNotFound, path, err)
	}
	t := &Text{Name: path, Context: context}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
		}
		cut := len(b) - len(b)/20
		t.Train, t.Test, t.Files = b[:cut], b[cut:], 1
	} else {
		var files []string
		err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() && (ext == "" || strings.HasSuffix(p, ext)) {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%w: reading %s: %v", ErrNotFound, path, err)
		}
		sort.Strings(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
			}
			rel, _ := filepath.Rel(path, f)
			if heldOut(filepath.ToSlash(rel)) {
				t.Test = append(t.Test, b...)
			} else {
				t.Train = append(t.Train, b...)
			}
		}
		t.Files = len(files)
	}
	if len(t.Train) < context+1 || len(t.Test) < context+1 {
		return nil, fmt.Errorf("%w: text corpus %s: %d training and %d held-out bytes, fewer than one window of %d", ErrInvalidArgument, path, len(t.Train), len(t.Test), context+1)
	}
	return t, nil
}

// Windows is the number of samples in a split: whole windows of
// Context+1 bytes starting every Context bytes.
func (t *Text) Windows(test bool) int {
	b := t.split(test)
	return (len(b) - 1) / t.Context
}

func (t *Text) split(test bool) []byte {
	if test {
		return t.Test
	}
	return t.Train
}

// Batch fills x with the inputs of windows idx (Context values each) and
// y with their labels (the next byte at every position).
func (t *Text) Batch(test bool, idx []int, x []float32, y []int32) error {
	b, c := t.split(test), t.Context
	if len(x) < len(idx)*c || len(y) < len(idx)*c {
		return fmt.Errorf("%w: text batch of %d windows needs %d inputs and labels, got %d and %d", ErrInvalidArgument, len(idx), len(idx)*c, len(x), len(y))
	}
	n := t.Windows(test)
	for k, i := range idx {
		if i < 0 || i >= n {
			return fmt.Errorf("%w: window %d of %d", ErrInvalidArgument, i, n)
		}
		w := b[i*c : i*c+c+1]
		for j := 0; j < c; j++ {
			x[k*c+j] = float32(w[j])
			y[k*c+j] = int32(w[j+1])
		}
	}
	return nil
}

// UnigramBits is the held-out bits per byte of the unigram byte model of
// the training split (each byte's frequency there, add-one smoothed): the
// baseline a language model must beat.
func (t *Text) UnigramBits() float64 {
	var count [256]float64
	for _, c := range t.Train {
		count[c]++
	}
	total := float64(len(t.Train)) + 256
	var bits float64
	for _, c := range t.Test {
		bits -= math.Log2((count[c] + 1) / total)
	}
	return bits / float64(len(t.Test))
}

// TextSplit is one split of a Text as a set of samples (windows).
type TextSplit struct {
	T    *Text
	Test bool
}

// Split returns the training (test false) or held-out split.
func (t *Text) Split(test bool) *TextSplit { return &TextSplit{t, test} }

// Len is the number of windows.
func (s *TextSplit) Len() int { return s.T.Windows(s.Test) }

// SampleSize is Context: the input bytes of a window.
func (s *TextSplit) SampleSize() int { return s.T.Context }

// LabelsPerSample is Context: the next byte at every position.
func (s *TextSplit) LabelsPerSample() int { return s.T.Context }

// Batch fills x and y with windows idx (Text.Batch).
func (s *TextSplit) Batch(idx []int, x []float32, y []int32) error {
	return s.T.Batch(s.Test, idx, x, y)
}
