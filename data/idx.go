package data

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gdist/gdist/internal/hugepage"
)

// DefaultDir is where the Debian package dataset-fashion-mnist installs
// Fashion-MNIST.
const DefaultDir = "/usr/share/datasets/fashion-mnist"

// InstallHint is the command that installs Fashion-MNIST into DefaultDir.
const InstallHint = "sudo apt-get install dataset-fashion-mnist"

// IDX magic numbers: two zero bytes, the element type (0x08 = unsigned
// byte), the number of dimensions.
const (
	idxImagesMagic = 0x00000803
	idxLabelsMagic = 0x00000801
)

// Limits checked before anything is allocated.
const (
	maxSamples = 10_000_000
	maxSide    = 4096
	maxPixels  = 1 << 32 // N*Rows*Cols
	classes    = 10      // Fashion-MNIST (and MNIST) classes
)

// Load reads the split ("train" or "test") of Fashion-MNIST from dir (use
// DefaultDir for the Debian package). It looks for
// train-images-idx3-ubyte and train-labels-idx1-ubyte (t10k-... for
// "test"), each either plain or with a .gz suffix; whether a file is
// gzipped is decided by its first bytes, not its name.
//
// A missing directory or file gives an error wrapping ErrNotFound (for
// DefaultDir it includes the install command); a malformed file gives an
// error wrapping ErrCorrupt that names the file.
func Load(dir, split string) (*Dataset, error) {
	imgPath, lblPath, err := files(dir, split)
	if err != nil {
		return nil, err
	}
	d, err := LoadFiles(imgPath, lblPath)
	if err != nil {
		return nil, err
	}
	d.Name = "fashion-mnist-" + split
	return d, nil
}

func hint(dir string) string {
	if filepath.Clean(dir) == DefaultDir {
		return "; install Fashion-MNIST with: " + InstallHint
	}
	return ""
}

// files returns the image and label files of split ("train" or "test")
// in dir.
func files(dir, split string) (imgPath, lblPath string, err error) {
	var prefix string
	switch split {
	case "train":
		prefix = "train"
	case "test":
		prefix = "t10k"
	default:
		return "", "", fmt.Errorf("%w: split %q, want \"train\" or \"test\"", ErrInvalidArgument, split)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		msg := fmt.Sprintf("Fashion-MNIST directory %s does not exist", dir)
		if err == nil {
			msg = fmt.Sprintf("Fashion-MNIST directory %s is not a directory", dir)
		} else if !errors.Is(err, fs.ErrNotExist) {
			msg = fmt.Sprintf("Fashion-MNIST directory %s: %v", dir, err)
		}
		return "", "", fmt.Errorf("%w: %s%s", ErrNotFound, msg, hint(dir))
	}
	if imgPath, err = findFile(dir, prefix+"-images-idx3-ubyte"); err != nil {
		return "", "", err
	}
	lblPath, err = findFile(dir, prefix+"-labels-idx1-ubyte")
	if err != nil {
		return "", "", err
	}
	return imgPath, lblPath, nil
}

// Count returns how many samples split ("train" or "test") of the
// Fashion-MNIST files in dir holds, reading only the files' headers: the
// checks Load makes of the files' presence, magic numbers and dimensions,
// and that the label and image counts agree, without reading the data.
func Count(dir, split string) (int, error) {
	imgPath, lblPath, err := files(dir, split)
	if err != nil {
		return 0, err
	}
	imgDims, _, err := readIDX(imgPath, idxImagesMagic, true)
	if err != nil {
		return 0, err
	}
	lblDims, _, err := readIDX(lblPath, idxLabelsMagic, true)
	if err != nil {
		return 0, err
	}
	if lblDims[0] != imgDims[0] {
		return 0, fmt.Errorf("%w: %s has %d labels but %s has %d images", ErrCorrupt, lblPath, lblDims[0], imgPath, imgDims[0])
	}
	return imgDims[0], nil
}

// findFile returns dir/name or dir/name.gz, whichever exists (the plain
// file first).
func findFile(dir, name string) (string, error) {
	for _, n := range []string{name, name + ".gz"} {
		p := filepath.Join(dir, n)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: neither %s nor %s.gz is in %s%s", ErrNotFound, name, name, dir, hint(dir))
}

// LoadFiles reads a dataset from an IDX image file (idx3, unsigned bytes)
// and an IDX label file (idx1, unsigned bytes), each plain or gzipped.
// Pixels are normalized with the Fashion-MNIST mean and std; labels must be
// below 10. Errors wrap ErrNotFound or ErrCorrupt and name the file.
func LoadFiles(imagesPath, labelsPath string) (*Dataset, error) {
	imgDims, pix, err := readIDX(imagesPath, idxImagesMagic, false)
	if err != nil {
		return nil, err
	}
	lblDims, lbl, err := readIDX(labelsPath, idxLabelsMagic, false)
	if err != nil {
		return nil, err
	}
	n, rows, cols := imgDims[0], imgDims[1], imgDims[2]
	if lblDims[0] != n {
		return nil, fmt.Errorf("%w: %s has %d labels but %s has %d images",
			ErrCorrupt, labelsPath, lblDims[0], imagesPath, n)
	}
	d := &Dataset{
		Name: filepath.Base(imagesPath), N: n, Rows: rows, Cols: cols, Classes: classes,
		Images: hugepage.Float32s(n * rows * cols),
		Labels: make([]int32, n),
	}
	i := 0
	for _, part := range lbl {
		for _, l := range part {
			if int(l) >= classes {
				return nil, fmt.Errorf("%w: %s: label %d of sample %d is not below %d classes",
					ErrCorrupt, labelsPath, l, i, classes)
			}
			d.Labels[i] = int32(l)
			i++
		}
	}
	var lut [256]float32
	for p := range lut {
		lut[p] = (float32(p)/255 - FashionMNISTMean) / FashionMNISTStd
	}
	img := d.Images
	for _, part := range pix {
		for j, p := range part {
			img[j] = lut[p]
		}
		img = img[len(part):]
	}
	return d, nil
}

// readIDX reads an unsigned-byte IDX file with the given magic and returns
// its dimensions and data, in pieces of up to 4 MiB. The data must match
// the dimensions exactly. With headerOnly it returns after checking the
// header (body nil).
func readIDX(path string, magic uint32, headerOnly bool) (dims []int, body [][]byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("%w: %s does not exist", ErrNotFound, path)
		}
		return nil, nil, fmt.Errorf("data: open %s: %w", path, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: bad gzip header: %v", ErrCorrupt, path, err)
		}
		defer zr.Close()
		r = zr
	}
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, path, fmt.Sprintf(format, args...))
	}
	// readErr turns a read error into ErrCorrupt when it comes from the data
	// (end of file, broken gzip stream) rather than the disk.
	readErr := func(what string, err error) error {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("data: read %s: %w", path, err)
		}
		return corrupt("%s: %v", what, err)
	}

	ndim := int(magic & 0xff)
	var hdr [4 + 4*3]byte
	hlen := 4 + 4*ndim
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return nil, nil, readErr("reading the 4-byte magic number", err)
	}
	if got := binary.BigEndian.Uint32(hdr[:4]); got != magic {
		kind := "images (idx3, unsigned bytes)"
		if ndim == 1 {
			kind = "labels (idx1, unsigned bytes)"
		}
		return nil, nil, corrupt("magic number 0x%08x, expected 0x%08x for %s", got, magic, kind)
	}
	if _, err := io.ReadFull(r, hdr[4:hlen]); err != nil {
		return nil, nil, readErr(fmt.Sprintf("reading the %d dimensions", ndim), err)
	}
	dims = make([]int, ndim)
	total := 1
	for i := range dims {
		v := binary.BigEndian.Uint32(hdr[4+4*i:])
		limit := uint32(maxSide)
		name := fmt.Sprintf("dimension %d", i)
		if i == 0 {
			limit, name = maxSamples, "sample count"
		}
		if v == 0 || v > limit {
			return nil, nil, corrupt("%s is %d, must be in [1, %d]", name, v, limit)
		}
		dims[i] = int(v)
		total *= int(v)
	}
	if total > maxPixels {
		return nil, nil, corrupt("dimensions %v make %d bytes, more than the limit %d", dims, total, maxPixels)
	}
	if headerOnly {
		return dims, nil, nil
	}
	// Read at most total+1 bytes, in chunks: memory grows with the data
	// actually present, never with what a (possibly corrupt) header
	// claims, and no byte is copied twice (io.ReadAll's growing buffer
	// copied and page-faulted about twice the data).
	const chunk = 4 << 20
	lr := io.LimitReader(r, int64(total)+1)
	n := 0
	for n <= total {
		c := make([]byte, min(chunk, total+1-n))
		m := 0
		var err error
		for m < len(c) && err == nil {
			var k int
			k, err = lr.Read(c[m:])
			m += k
		}
		if m > 0 {
			body = append(body, c[:m])
			n += m
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, readErr(fmt.Sprintf("reading %d data bytes", total), err)
		}
	}
	switch {
	case n < total:
		return nil, nil, corrupt("truncated: dimensions %v need %d data bytes after the %d-byte header, found %d",
			dims, total, hlen, n)
	case n > total:
		return nil, nil, corrupt("oversized: dimensions %v need %d data bytes after the %d-byte header, found more",
			dims, total, hlen)
	}
	return dims, body, nil
}
