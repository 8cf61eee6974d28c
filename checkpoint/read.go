package checkpoint

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// maxHeader bounds the JSON header (100 MiB, like the reference reader's
// 100 MB).
const maxHeader = 100 << 20

// Read reads the safetensors file at path. It returns the tensors by name
// and the metadata (an empty map if the file has none). A malformed file
// gives an error wrapping ErrCorrupt that names the file and, where it
// applies, the tensor; see the package doc for what is checked.
func Read(path string) (tensors map[string]Tensor, meta map[string]string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: read: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: read: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%w: read %s: not a regular file", ErrInvalidArgument, path)
	}
	return readFrom(f, st.Size(), path)
}

// ReadFrom reads a safetensors file of size bytes from r, with the checks
// of Read. Errors name the source as "safetensors data".
func ReadFrom(r io.ReaderAt, size int64) (tensors map[string]Tensor, meta map[string]string, err error) {
	return readFrom(r, size, "safetensors data")
}

type fileEntry struct {
	name       string
	dtype      string
	shape      []int
	begin, end int64
}

func readFrom(r io.ReaderAt, size int64, name string) (map[string]Tensor, map[string]string, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, name, fmt.Sprintf(format, args...))
	}
	// read fills b from off; running out of data is corruption (the file is
	// shorter than its header says), anything else an I/O error.
	read := func(b []byte, off int64, what string) error {
		n, err := r.ReadAt(b, off)
		if n == len(b) {
			return nil
		}
		if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return corrupt("truncated: reading %s, got %d of %d bytes at offset %d", what, n, len(b), off)
		}
		return fmt.Errorf("checkpoint: read %s: %s: %w", name, what, err)
	}

	if size < 8 {
		return nil, nil, corrupt("file is %d bytes, shorter than the 8-byte header length", size)
	}
	var nb [8]byte
	if err := read(nb[:], 0, "the header length"); err != nil {
		return nil, nil, err
	}
	hlen := binary.LittleEndian.Uint64(nb[:])
	if hlen > maxHeader {
		return nil, nil, corrupt("header length %d is larger than the %d-byte limit", hlen, maxHeader)
	}
	if hlen > uint64(size-8) {
		return nil, nil, corrupt("header length %d is larger than the %d bytes after the length field", hlen, size-8)
	}
	hdr := make([]byte, hlen)
	if err := read(hdr, 8, "the header"); err != nil {
		return nil, nil, err
	}
	dataStart := 8 + int64(hlen)
	dataLen := size - dataStart

	entries, meta, err := parseHeader(hdr)
	if err != nil {
		return nil, nil, corrupt("%v", err)
	}
	for _, e := range entries {
		tname := fmt.Sprintf("tensor %q", e.name)
		esize := int64(dtypeSizes[e.dtype])
		n, err := NumElements(e.shape)
		if err != nil || int64(n) > math.MaxInt64/esize {
			return nil, nil, corrupt("%s: shape %v: too many elements", tname, e.shape)
		}
		switch {
		case e.begin < 0 || e.end < e.begin:
			return nil, nil, corrupt("%s: data_offsets [%d, %d] are not an increasing pair of non-negative offsets", tname, e.begin, e.end)
		case e.end > dataLen:
			return nil, nil, corrupt("%s: data_offsets [%d, %d] go past the end of the %d-byte data section", tname, e.begin, e.end, dataLen)
		case e.end-e.begin != int64(n)*esize:
			return nil, nil, corrupt("%s: data_offsets [%d, %d] hold %d bytes, but %s shape %v needs %d (%d elements x %d)",
				tname, e.begin, e.end, e.end-e.begin, e.dtype, e.shape, int64(n)*esize, n, esize)
		}
	}
	// The tensors must tile the data section: sorted by offset, each starts
	// where the previous one ends, and the last one ends the file.
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b fileEntry) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end))
	})
	var pos int64
	prev := "the start of the data section"
	for _, e := range sorted {
		if e.begin < pos {
			return nil, nil, corrupt("tensor %q at [%d, %d] overlaps %s, which ends at %d", e.name, e.begin, e.end, prev, pos)
		}
		if e.begin > pos {
			return nil, nil, corrupt("tensor %q starts at %d, leaving a gap of %d unused bytes after %s", e.name, e.begin, e.begin-pos, prev)
		}
		pos = e.end
		prev = fmt.Sprintf("tensor %q", e.name)
	}
	if pos != dataLen {
		return nil, nil, corrupt("the tensors end at %d, but the data section has %d bytes (%d trailing bytes)", pos, dataLen, dataLen-pos)
	}

	// The checksum, where the writer recorded one (ChecksumKey).
	want, sum := meta[ChecksumKey]
	var wantCRC uint64
	if sum {
		delete(meta, ChecksumKey)
		if wantCRC, err = strconv.ParseUint(want, 16, 32); err != nil || len(want) != 8 {
			return nil, nil, corrupt("metadata %s %q is not 8 hex digits", ChecksumKey, want)
		}
	}
	crc := crc32.NewIEEE()
	tensors := make(map[string]Tensor, len(entries))
	for _, e := range sorted { // file order: the checksum's
		data := make([]byte, e.end-e.begin)
		if err := read(data, dataStart+e.begin, fmt.Sprintf("the data of tensor %q", e.name)); err != nil {
			return nil, nil, err
		}
		if sum {
			crc.Write(data)
		}
		tensors[e.name] = Tensor{Name: e.name, DType: e.dtype, Shape: e.shape, Data: data}
	}
	if got := crc.Sum32(); sum && uint64(got) != wantCRC {
		return nil, nil, corrupt("the tensor data's checksum (CRC-32 %08x) does not match the %s recorded when the file was written: the data changed after it was written (a disk, copy or transfer error, or an edit): do not use it; resume from another checkpoint (-keep N keeps older ones) or copy it again", got, want)
	}
	return tensors, meta, nil
}

// parseHeader decodes the JSON header strictly: one object, no duplicate
// keys, every tensor entry with exactly dtype, shape and data_offsets.
func parseHeader(hdr []byte) ([]fileEntry, map[string]string, error) {
	trimmed := bytes.TrimLeft(hdr, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, nil, errors.New("header is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return nil, nil, fmt.Errorf("header is not valid JSON: %v", err)
	}
	var entries []fileEntry
	meta := map[string]string{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("header is not valid JSON: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("header is not valid JSON: key %v", tok)
		}
		if seen[key] {
			return nil, nil, fmt.Errorf("header has the key %q twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, fmt.Errorf("header is not valid JSON: value of %q: %v", key, err)
		}
		if key == metadataKey {
			if err := strictUnmarshal(raw, &meta); err != nil || meta == nil {
				return nil, nil, fmt.Errorf("%s is not an object of string values: %s", metadataKey, clip(raw))
			}
			continue
		}
		var e struct {
			DType   *string  `json:"dtype"`
			Shape   *[]int   `json:"shape"`
			Offsets *[]int64 `json:"data_offsets"`
		}
		if err := strictUnmarshal(raw, &e); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: bad entry %s: %v", key, clip(raw), err)
		}
		switch {
		case e.DType == nil || e.Shape == nil || e.Offsets == nil:
			return nil, nil, fmt.Errorf("tensor %q: entry %s lacks dtype, shape or data_offsets", key, clip(raw))
		case len(*e.Offsets) != 2:
			return nil, nil, fmt.Errorf("tensor %q: data_offsets %v is not a [begin, end] pair", key, *e.Offsets)
		}
		if _, ok := DTypeSize(*e.DType); !ok {
			return nil, nil, fmt.Errorf("tensor %q: unknown dtype %q", key, *e.DType)
		}
		for i, d := range *e.Shape {
			if d < 0 {
				return nil, nil, fmt.Errorf("tensor %q: dim %d of shape %v is negative", key, i, *e.Shape)
			}
		}
		entries = append(entries, fileEntry{
			name: key, dtype: *e.DType, shape: *e.Shape,
			begin: (*e.Offsets)[0], end: (*e.Offsets)[1],
		})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, nil, fmt.Errorf("header is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("header has data after its JSON object")
	}
	return entries, meta, nil
}

func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// clip shortens a JSON fragment for an error message.
func clip(raw []byte) string {
	s := strings.TrimSpace(string(raw))
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
