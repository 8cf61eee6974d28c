package checkpoint

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// metadataKey is the reserved header key of the string-to-string metadata.
const metadataKey = "__metadata__"

// ChecksumKey is the metadata key under which Write and Encode record the
// CRC-32 (IEEE, as Python's zlib.crc32 computes it) of the file's whole
// data section, as 8 lowercase hex digits. Read and ReadFrom verify it
// when it is there and leave it out of the metadata they return; files
// without it (older ones, other writers) read as before. Other readers
// (safetensors, PyTorch) see one more metadata string.
const ChecksumKey = "gdist_data_crc32"

type headerEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// layout validates the tensors and returns them in file order with the
// padded JSON header. Its errors carry no sentinel; callers wrap them.
func layout(tensors []Tensor, meta map[string]string, checksum bool) ([]Tensor, []byte, error) {
	seen := make(map[string]bool, len(tensors))
	for i, t := range tensors {
		switch {
		case t.Name == "":
			return nil, nil, fmt.Errorf("tensor %d has an empty name", i)
		case t.Name == metadataKey:
			return nil, nil, fmt.Errorf("tensor %d is named %q, which is reserved for metadata", i, metadataKey)
		case seen[t.Name]:
			return nil, nil, fmt.Errorf("two tensors are named %q", t.Name)
		}
		seen[t.Name] = true
		if err := t.validate(); err != nil {
			return nil, nil, err
		}
	}
	// Largest element size first, then by name: every tensor then starts at
	// a multiple of its element size, and the order of the input is moot.
	order := slices.Clone(tensors)
	slices.SortFunc(order, func(a, b Tensor) int {
		if c := cmp.Compare(dtypeSizes[b.DType], dtypeSizes[a.DType]); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	hdr := make(map[string]any, len(order)+1)
	var off int64
	for _, t := range order {
		shape := t.Shape
		if shape == nil {
			shape = []int{} // a scalar: "shape": [], never null
		}
		hdr[t.Name] = headerEntry{DType: t.DType, Shape: shape, Offsets: [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	if checksum {
		crc := crc32.NewIEEE()
		for _, t := range order {
			crc.Write(t.Data)
		}
		m := make(map[string]string, len(meta)+1)
		for k, v := range meta {
			m[k] = v
		}
		m[ChecksumKey] = fmt.Sprintf("%08x", crc.Sum32())
		meta = m
	}
	if len(meta) > 0 {
		hdr[metadataKey] = meta
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // map keys come out sorted
	enc.SetEscapeHTML(false)
	if err := enc.Encode(hdr); err != nil {
		return nil, nil, fmt.Errorf("encoding the header: %v", err)
	}
	h := bytes.TrimRight(buf.Bytes(), "\n")
	if len(h) > maxHeader-8 {
		return nil, nil, fmt.Errorf("header of %d bytes is larger than the %d-byte limit", len(h), maxHeader)
	}
	for len(h)%8 != 0 { // 8 + len(h) is a multiple of 8: aligned data
		h = append(h, ' ')
	}
	return order, h, nil
}

// Encode writes a safetensors file holding tensors and meta (which may be
// nil) to w, after validating them all: unique non-empty names, known
// dtypes, non-negative dims, len(Data) == elements*element size. Invalid
// tensors give an error wrapping ErrInvalidArgument before anything is
// written.
func Encode(w io.Writer, tensors []Tensor, meta map[string]string) error {
	return encodeWith(w, tensors, meta, true)
}

// encodeWith is Encode, with the checksum (ChecksumKey) or without.
func encodeWith(w io.Writer, tensors []Tensor, meta map[string]string, checksum bool) error {
	order, h, err := layout(tensors, meta, checksum)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return encode(w, order, h)
}

func encode(w io.Writer, order []Tensor, h []byte) error {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	for _, t := range order {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}

// Write writes tensors and meta (which may be nil) to the safetensors file
// at path, atomically: the data goes to a temporary file in the same
// directory (".<name>.tmp*"), which is fsynced, closed and renamed over
// path, and then the directory is fsynced. On any error the temporary file
// is removed and an existing file at path is left untouched. The new file
// keeps the permissions of the file it replaces, or gets 0644.
//
// Tensors are validated first (see Encode); a bad tensor gives an error
// wrapping ErrInvalidArgument and creates no file. Write is safe for
// concurrent use on different paths.
func Write(path string, tensors []Tensor, meta map[string]string) (err error) {
	order, h, err := layout(tensors, meta, true)
	if err != nil {
		return fmt.Errorf("%w: write %s: %v", ErrInvalidArgument, path, err)
	}
	perm := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return fmt.Errorf("%w: write %s: it is a directory", ErrInvalidArgument, path)
		}
		perm = st.Mode().Perm()
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if !renamed {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := encode(bw, order, h); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", tmp, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("checkpoint: write %s: fsync: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("checkpoint: write %s: close: %w", tmp, err)
	}
	if testHookBeforeRename != nil {
		if err := testHookBeforeRename(tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	renamed = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint: wrote %s, but syncing its directory failed: %w", path, err)
	}
	return nil
}

// testHookBeforeRename, when set by a test, runs after the temporary file
// is complete and before the rename; an error fails the Write there.
var testHookBeforeRename func(tmp string) error

// syncDir fsyncs a directory so a rename in it is durable. File systems
// that cannot sync directories (EINVAL) are not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}
