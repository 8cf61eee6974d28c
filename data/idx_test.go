package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// idxBytes encodes an unsigned-byte IDX file.
func idxBytes(magic uint32, dims []uint32, body []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, magic)
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, d)
	}
	b.Write(body)
	return b.Bytes()
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// smallSet returns the pixels and labels of n images of rows x cols.
func smallSet(n, rows, cols int) ([]byte, []byte) {
	pix := make([]byte, n*rows*cols)
	for i := range pix {
		pix[i] = byte(i * 37)
	}
	lbl := make([]byte, n)
	for i := range lbl {
		lbl[i] = byte(i % 10)
	}
	return pix, lbl
}

// writeSplit writes a valid split with the given prefix ("train"/"t10k").
func writeSplit(t *testing.T, dir, prefix string, n, rows, cols int, gzipped bool) ([]byte, []byte) {
	t.Helper()
	pix, lbl := smallSet(n, rows, cols)
	img := idxBytes(idxImagesMagic, []uint32{uint32(n), uint32(rows), uint32(cols)}, pix)
	lab := idxBytes(idxLabelsMagic, []uint32{uint32(n)}, lbl)
	suffix := ""
	if gzipped {
		img, lab, suffix = gz(t, img), gz(t, lab), ".gz"
	}
	writeFile(t, filepath.Join(dir, prefix+"-images-idx3-ubyte"+suffix), img)
	writeFile(t, filepath.Join(dir, prefix+"-labels-idx1-ubyte"+suffix), lab)
	return pix, lbl
}

func checkDataset(t *testing.T, d *Dataset, n, rows, cols int, pix, lbl []byte) {
	t.Helper()
	if d.N != n || d.Rows != rows || d.Cols != cols || d.Classes != 10 {
		t.Fatalf("got N=%d Rows=%d Cols=%d Classes=%d, want %d %d %d 10", d.N, d.Rows, d.Cols, d.Classes, n, rows, cols)
	}
	if len(d.Images) != n*rows*cols || len(d.Labels) != n {
		t.Fatalf("got %d image values and %d labels", len(d.Images), len(d.Labels))
	}
	for i, p := range pix {
		want := (float32(p)/255 - FashionMNISTMean) / FashionMNISTStd
		if math.Abs(float64(d.Images[i]-want)) > 1e-6 {
			t.Fatalf("pixel %d = %v, want %v", i, d.Images[i], want)
		}
	}
	for i, l := range lbl {
		if d.Labels[i] != int32(l) {
			t.Fatalf("label %d = %d, want %d", i, d.Labels[i], l)
		}
	}
}

func TestLoadRoundTrip(t *testing.T) {
	for _, gzipped := range []bool{false, true} {
		dir := t.TempDir()
		pix, lbl := writeSplit(t, dir, "train", 7, 3, 5, gzipped)
		tpix, tlbl := writeSplit(t, dir, "t10k", 4, 3, 5, gzipped)
		d, err := Load(dir, "train")
		if err != nil {
			t.Fatalf("gzip=%v: %v", gzipped, err)
		}
		checkDataset(t, d, 7, 3, 5, pix, lbl)
		if d.Name != "fashion-mnist-train" {
			t.Errorf("name %q", d.Name)
		}
		d, err = Load(dir, "test")
		if err != nil {
			t.Fatalf("gzip=%v: %v", gzipped, err)
		}
		checkDataset(t, d, 4, 3, 5, tpix, tlbl)
		for split, want := range map[string]int{"train": 7, "test": 4} {
			if n, err := Count(dir, split); err != nil || n != want {
				t.Errorf("gzip=%v: Count(%s) = %d, %v; want %d", gzipped, split, n, err, want)
			}
		}
	}
}

// TestCountChecksHeaders: Count refuses what Load refuses in the headers
// (missing file, wrong magic, label and image counts that disagree).
func TestCountChecksHeaders(t *testing.T) {
	pix, lbl := smallSet(4, 3, 3)
	cases := []struct {
		name     string
		img, lbl []byte
		want     error
		says     string
	}{
		{"wrong magic", idxBytes(idxLabelsMagic, []uint32{4}, lbl), idxBytes(idxLabelsMagic, []uint32{4}, lbl), ErrCorrupt, "magic number"},
		{"counts differ", idxBytes(idxImagesMagic, []uint32{4, 3, 3}, pix), idxBytes(idxLabelsMagic, []uint32{3}, lbl[:3]), ErrCorrupt, "3 labels but"},
		{"no labels", idxBytes(idxImagesMagic, []uint32{4, 3, 3}, pix), nil, ErrNotFound, "labels"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "train-images-idx3-ubyte"), c.img)
		if c.lbl != nil {
			writeFile(t, filepath.Join(dir, "train-labels-idx1-ubyte"), c.lbl)
		}
		_, err := Count(dir, "train")
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
}

// Gzip is detected by its magic bytes, not by the name.
func TestLoadGzipByContent(t *testing.T) {
	dir := t.TempDir()
	pix, lbl := smallSet(6, 2, 2)
	img := idxBytes(idxImagesMagic, []uint32{6, 2, 2}, pix)
	lab := idxBytes(idxLabelsMagic, []uint32{6}, lbl)
	writeFile(t, filepath.Join(dir, "train-images-idx3-ubyte"), gz(t, img)) // gzipped, plain name
	writeFile(t, filepath.Join(dir, "train-labels-idx1-ubyte.gz"), lab)     // plain, .gz name
	d, err := Load(dir, "train")
	if err != nil {
		t.Fatal(err)
	}
	checkDataset(t, d, 6, 2, 2, pix, lbl)
}

func TestLoadCorrupt(t *testing.T) {
	pix, lbl := smallSet(4, 3, 3)
	goodImg := idxBytes(idxImagesMagic, []uint32{4, 3, 3}, pix)
	goodLbl := idxBytes(idxLabelsMagic, []uint32{4}, lbl)
	badLbl := append([]byte(nil), lbl...)
	badLbl[2] = 10
	brokenGz := gz(t, goodImg)
	brokenGz = brokenGz[:len(brokenGz)-6] // cut the trailer: checksum lost
	cases := []struct {
		name     string
		img, lbl []byte
		file     string // base name the error must name
		want     string // phrase the error must contain
	}{
		{"bad image magic", idxBytes(0x00000804, []uint32{4, 3, 3}, pix), goodLbl, "images", "magic number 0x00000804, expected 0x00000803"},
		{"labels as images", goodLbl, goodLbl, "images", "magic number 0x00000801"},
		{"bad label magic", goodImg, idxBytes(0x00000803, []uint32{4}, lbl), "labels", "expected 0x00000801"},
		{"empty file", []byte{}, goodLbl, "images", "magic"},
		{"short header", goodImg[:9], goodLbl, "images", "dimensions"},
		{"truncated images", goodImg[:len(goodImg)-1], goodLbl, "images", "truncated: dimensions [4 3 3] need 36 data bytes"},
		{"oversized images", append(append([]byte(nil), goodImg...), 0), goodLbl, "images", "oversized"},
		{"truncated labels", goodImg, goodLbl[:len(goodLbl)-2], "labels", "truncated"},
		{"count mismatch", goodImg, idxBytes(idxLabelsMagic, []uint32{3}, lbl[:3]), "labels", "3 labels but"},
		{"label out of range", goodImg, idxBytes(idxLabelsMagic, []uint32{4}, badLbl), "labels", "label 10 of sample 2"},
		{"huge N", idxBytes(idxImagesMagic, []uint32{20_000_000, 28, 28}, nil), goodLbl, "images", "sample count is 20000000"},
		{"huge rows", idxBytes(idxImagesMagic, []uint32{4, 5000, 3}, nil), goodLbl, "images", "dimension 1 is 5000"},
		{"huge pixels", idxBytes(idxImagesMagic, []uint32{maxSamples, 4096, 4096}, nil), goodLbl, "images", "more than the limit"},
		{"zero cols", idxBytes(idxImagesMagic, []uint32{4, 3, 0}, nil), goodLbl, "images", "dimension 2 is 0"},
		{"huge label count", goodImg, idxBytes(idxLabelsMagic, []uint32{0xffffffff}, nil), "labels", "sample count"},
		{"broken gzip", brokenGz, goodLbl, "images", "unexpected EOF"},
		{"bad gzip header", []byte{0x1f, 0x8b, 0, 0}, goodLbl, "images", "gzip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "train-images-idx3-ubyte"), c.img)
			writeFile(t, filepath.Join(dir, "train-labels-idx1-ubyte"), c.lbl)
			_, err := Load(dir, "train")
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), filepath.Join(dir, "train-"+c.file)) {
				t.Errorf("error %q does not name the %s file", err, c.file)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	_, err := Load(dir, "train")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), dir+" does not exist") {
		t.Fatalf("err = %v, want ErrNotFound naming %s", err, dir)
	}
	if strings.Contains(err.Error(), "apt-get") {
		t.Errorf("install hint given for a non-default dir: %v", err)
	}

	// An existing directory without the files.
	dir = t.TempDir()
	writeSplit(t, dir, "train", 2, 2, 2, true)
	_, err = Load(dir, "test")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "t10k-images-idx3-ubyte.gz") {
		t.Fatalf("err = %v, want ErrNotFound naming the t10k images", err)
	}
	os.Remove(filepath.Join(dir, "train-labels-idx1-ubyte.gz"))
	_, err = Load(dir, "train")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "train-labels-idx1-ubyte") {
		t.Fatalf("err = %v, want ErrNotFound naming the train labels", err)
	}

	// A file where the directory should be.
	_, err = Load(filepath.Join(dir, "train-images-idx3-ubyte.gz"), "train")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("err = %v, want ErrNotFound saying not a directory", err)
	}

	// The default dir gets the install command.
	for _, d := range []string{DefaultDir, DefaultDir + "/"} {
		if h := hint(d); !strings.Contains(h, "sudo apt-get install dataset-fashion-mnist") {
			t.Errorf("hint(%q) = %q, want the apt command", d, h)
		}
	}
	if _, err := os.Stat(DefaultDir); err != nil {
		_, err := Load(DefaultDir, "train")
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "sudo apt-get install dataset-fashion-mnist") {
			t.Fatalf("err = %v, want ErrNotFound with the apt command", err)
		}
	}

	if _, err := Load(dir, "validation"); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), `"validation"`) {
		t.Fatalf("bad split: err = %v", err)
	}
}

func TestLoadFashionMNIST(t *testing.T) {
	if _, err := os.Stat(DefaultDir); err != nil {
		t.Skipf("Fashion-MNIST is not installed in %s (%v); install it with: %s", DefaultDir, err, InstallHint)
	}
	if testing.Short() {
		t.Skip("-short: not loading the real Fashion-MNIST")
	}
	for _, c := range []struct {
		split string
		n     int
	}{{"train", 60000}, {"test", 10000}} {
		d, err := Load(DefaultDir, c.split)
		if err != nil {
			t.Fatal(err)
		}
		if d.N != c.n || d.Rows != 28 || d.Cols != 28 || d.Classes != 10 {
			t.Fatalf("%s: N=%d %dx%d classes %d, want %d 28x28 10", c.split, d.N, d.Rows, d.Cols, d.Classes, c.n)
		}
		var count [10]int
		for _, l := range d.Labels {
			count[l]++
		}
		for k, n := range count {
			if n != c.n/10 {
				t.Errorf("%s: class %d has %d samples, want %d", c.split, k, n, c.n/10)
			}
		}
		if c.split == "train" {
			// The normalization constants are the training set's statistics.
			var s, s2 float64
			for _, v := range d.Images {
				s += float64(v)
				s2 += float64(v) * float64(v)
			}
			m := s / float64(len(d.Images))
			sd := math.Sqrt(s2/float64(len(d.Images)) - m*m)
			if math.Abs(m) > 0.01 || math.Abs(sd-1) > 0.01 {
				t.Errorf("normalized train pixels have mean %.4f std %.4f, want about 0 and 1", m, sd)
			}
		}
	}
}
