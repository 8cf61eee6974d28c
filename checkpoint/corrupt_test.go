package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// file assembles a safetensors file from a header string and data.
func file(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// withLength replaces the header length field.
func withLength(b []byte, n uint64) []byte {
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint64(b, n)
	return b
}

func TestReadCorrupt(t *testing.T) {
	var good bytes.Buffer
	if err := Encode(&good, sampleTensors(), sampleMeta); err != nil {
		t.Fatal(err)
	}
	g := good.Bytes()
	d8 := make([]byte, 8)
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "file is 0 bytes, shorter than the 8-byte header length"},
		{"5 bytes", g[:5], "file is 5 bytes"},
		{"header length huge", withLength(g, 1<<62), "header length 4611686018427387904 is larger than the 104857600-byte limit"},
		{"header length past end", withLength(g, uint64(len(g))), "is larger than the"},
		{"truncated data", g[:len(g)-1], "go past the end of the"},
		{"truncated header", g[:40], "header length"},
		{"trailing bytes", append(bytes.Clone(g), 0), "1 trailing bytes"},
		{"bad JSON", file(`{"a": {"dtype": "F32",`, nil), "header is not valid JSON"},
		{"not an object", file(`[1, 2]`, nil), "header is not a JSON object"},
		{"empty header", file(``, nil), "header is not a JSON object"},
		{"data after object", file(`{} {}`, nil), "data after its JSON object"},
		{"garbage after object", file(`{}x`, nil), "data after its JSON object"},
		{"duplicate key", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{1, 2}), `key "a" twice`},
		{"unknown dtype", file(`{"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`, make([]byte, 16)), `tensor "w": unknown dtype "F128"`},
		{"negative dim", file(`{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, nil), `tensor "w": dim 0 of shape [-1] is negative`},
		{"fractional dim", file(`{"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}}`, nil), `tensor "w": bad entry`},
		{"missing field", file(`{"w":{"dtype":"U8","shape":[1]}}`, d8[:1]), `tensor "w": entry {"dtype":"U8","shape":[1]} lacks`},
		{"unknown field", file(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, d8[:1]), `unknown field "x"`},
		{"entry not object", file(`{"w":[1]}`, nil), `tensor "w": bad entry [1]`},
		{"offsets not pair", file(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, d8[:1]), `tensor "w": data_offsets [0 1 2] is not a [begin, end] pair`},
		{"offsets reversed", file(`{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, d8), `tensor "w": data_offsets [4, 0] are not an increasing pair`},
		{"offsets negative", file(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, d8), `data_offsets [-1, 0]`},
		{"offsets out of range", file(`{"w":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}}`, d8), `tensor "w": data_offsets [8, 16] go past the end of the 8-byte data section`},
		{"wrong size for shape", file(`{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,8]}}`, d8), `tensor "w": data_offsets [0, 8] hold 8 bytes, but F32 shape [2 3] needs 24 (6 elements x 4)`},
		{"huge shape", file(`{"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, d8), `tensor "w": shape [4294967296 4294967296]: too many elements`},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, d8), `tensor "b" at [4, 8] overlaps tensor "a", which ends at 8`},
		{"gap", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, d8), `tensor "a" starts at 4, leaving a gap of 4 unused bytes`},
		{"metadata not strings", file(`{"__metadata__":{"epoch":3}}`, nil), "__metadata__ is not an object of string values"},
		{"metadata null", file(`{"__metadata__":null}`, nil), "__metadata__ is not an object"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors")
			if err := os.WriteFile(path, c.b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := Read(path)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q should name %s and say %q", err, path, c.want)
			}
			_, _, err = ReadFrom(bytes.NewReader(c.b), int64(len(c.b)))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "safetensors data") {
				t.Errorf("ReadFrom: err = %v", err)
			}
		})
	}
	// A reader shorter than the size it claims.
	_, _, err := ReadFrom(bytes.NewReader(g[:len(g)-3]), int64(len(g)))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("short reader: err = %v", err)
	}
	// A failing reader is an I/O error, not corruption.
	_, _, err = ReadFrom(failingReader{}, 100)
	if err == nil || errors.Is(err, ErrCorrupt) || !errors.Is(err, errDisk) {
		t.Errorf("failing reader: err = %v", err)
	}
	// Valid oddities: an empty object, whitespace, no padding.
	for _, b := range [][]byte{file(`{}`, nil), file(" {\n} \t", nil), file(`{"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}`, d8[:4])} {
		if _, _, err := ReadFrom(bytes.NewReader(b), int64(len(b))); err != nil {
			t.Errorf("%q: %v", b[8:], err)
		}
	}
}

var errDisk = errors.New("disk on fire")

type failingReader struct{}

func (failingReader) ReadAt(p []byte, off int64) (int, error) { return 0, errDisk }

var _ io.ReaderAt = failingReader{}

// TestChecksum: Write puts a CRC-32 of the data section in the metadata
// (ChecksumKey); Read verifies it and names a mismatch, hides the key from
// the metadata it returns, and still reads files without it (written
// before checksums, or by other writers).
func TestChecksum(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ck.safetensors")
	if err := Write(path, sampleTensors(), sampleMeta); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	if !bytes.Contains(raw[8:8+n], []byte(`"`+ChecksumKey+`":"`)) {
		t.Fatalf("no %s in the header: %s", ChecksumKey, raw[8:8+n])
	}
	if _, meta, err := Read(path); err != nil || meta[ChecksumKey] != "" || len(meta) != len(sampleMeta) {
		t.Fatalf("Read: meta %v, %v", meta, err)
	}
	// One bit flipped in the data: a clear error naming the checksum.
	bad := bytes.Clone(raw)
	bad[len(bad)-3] ^= 0x10
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = Read(path)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checksum") || !strings.Contains(err.Error(), path) {
		t.Fatalf("a flipped bit: %v", err)
	}
	t.Log(err)
	// A file without a checksum (an older one) reads as before.
	var old bytes.Buffer
	if err := encodeWith(&old, sampleTensors(), sampleMeta, false); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(old.Bytes(), []byte(ChecksumKey)) {
		t.Fatal("the old-style file has a checksum")
	}
	if _, meta, err := ReadFrom(bytes.NewReader(old.Bytes()), int64(old.Len())); err != nil || len(meta) != len(sampleMeta) {
		t.Fatalf("reading a file without a checksum: %v %v", meta, err)
	}
	// A malformed checksum is corruption too.
	hdr := strings.Replace(string(raw[8:8+n]), `"`+ChecksumKey+`":"`, `"`+ChecksumKey+`":"zz`, 1)
	if _, _, err := ReadFrom(bytes.NewReader(file(hdr, raw[8+n:])), int64(8+len(hdr)+len(raw)-8-int(n))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a malformed checksum: %v", err)
	}
}
