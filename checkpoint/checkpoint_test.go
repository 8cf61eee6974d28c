package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func sampleTensors() []Tensor {
	bf16 := Tensor{Name: "h.bf16", DType: "BF16", Shape: []int{2}, Data: []byte{0x80, 0x3f, 0x10, 0xc0}} // 1, -2.25
	return []Tensor{
		F32("0.weight", []int{2, 3}, []float32{1, -2, 3.5, 0, float32(math.Inf(1)), 1e-30}),
		F32("0.bias", []int{2}, []float32{0.25, -0.125}),
		I64("step", []int{1}, []int64{-7}),
		F64("scalar", nil, []float64{math.Pi}),
		I32("counts", []int{3}, []int32{1, -1, math.MaxInt32}),
		{Name: "empty", DType: "U8", Shape: []int{0, 4}, Data: []byte{}},
		{Name: "mask", DType: "U8", Shape: []int{3}, Data: []byte{1, 0, 255}},
		bf16,
	}
}

var sampleMeta = map[string]string{"format": "pt", "note": "<&> \"quoted\"\n ünïcode"}

// noTemps fails if dir holds a leftover temporary file.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	in := sampleTensors()
	if err := Write(path, in, sampleMeta); err != nil {
		t.Fatal(err)
	}
	noTemps(t, dir)
	got, meta, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(meta, sampleMeta) {
		t.Errorf("meta = %q, want %q", meta, sampleMeta)
	}
	if len(got) != len(in) {
		t.Fatalf("read %d tensors, wrote %d", len(got), len(in))
	}
	for _, w := range in {
		g, ok := got[w.Name]
		if !ok {
			t.Fatalf("tensor %q missing", w.Name)
		}
		if g.Name != w.Name || g.DType != w.DType || len(g.Shape) != len(w.Shape) ||
			!slices.Equal(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("tensor %q: got %+v, want %+v", w.Name, g, w)
		}
	}
	f, err := got["0.weight"].Float32s()
	if err != nil || !slices.Equal(f, []float32{1, -2, 3.5, 0, float32(math.Inf(1)), 1e-30}) {
		t.Errorf("0.weight = %v, %v", f, err)
	}
	if v, err := got["step"].Int64s(); err != nil || !slices.Equal(v, []int64{-7}) {
		t.Errorf("step = %v, %v", v, err)
	}

	// Layout: data 8-byte aligned, each tensor aligned to its element size,
	// contiguous, and independent of the input order.
	raw, _ := os.ReadFile(path)
	hlen := binary.LittleEndian.Uint64(raw)
	if (8+hlen)%8 != 0 {
		t.Errorf("data section starts at %d, not 8-byte aligned", 8+hlen)
	}
	entries, _, err := parseHeader(raw[8 : 8+hlen])
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.begin%int64(dtypeSizes[e.dtype]) != 0 {
			t.Errorf("tensor %q (%s) starts at %d, not aligned", e.name, e.dtype, e.begin)
		}
	}
	var a, b bytes.Buffer
	rev := slices.Clone(in)
	slices.Reverse(rev)
	if err := Encode(&a, in, sampleMeta); err != nil {
		t.Fatal(err)
	}
	if err := Encode(&b, rev, sampleMeta); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || !bytes.Equal(a.Bytes(), raw) {
		t.Error("the file depends on the order of the tensors given")
	}
	// ReadFrom on memory; no metadata gives an empty map.
	b.Reset()
	if err := Encode(&b, in[:1], nil); err != nil {
		t.Fatal(err)
	}
	got, meta, err = ReadFrom(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil || len(got) != 1 || meta == nil || len(meta) != 0 {
		t.Fatalf("ReadFrom: %d tensors, meta %v, err %v", len(got), meta, err)
	}
	// The header's metadata is the checksum alone.
	if !regexp.MustCompile(`"` + metadataKey + `":\{"` + ChecksumKey + `":"[0-9a-f]{8}"\}`).MatchString(b.String()) {
		t.Errorf("metadata beyond the checksum written: %q", b.String())
	}
}

func TestConversions(t *testing.T) {
	f16 := Tensor{Name: "h", DType: "F16", Shape: []int{6}, Data: []byte{
		0x00, 0x3c, // 1
		0x00, 0xc0, // -2
		0x01, 0x00, // 2^-24, smallest subnormal
		0xff, 0x7b, // 65504, largest finite
		0x00, 0x7c, // +Inf
		0x00, 0x80, // -0
	}}
	f, err := f16.Float32s()
	want := []float32{1, -2, float32(math.Ldexp(1, -24)), 65504, float32(math.Inf(1)), float32(math.Copysign(0, -1))}
	if err != nil || !slices.Equal(f, want) || !math.Signbit(float64(f[5])) {
		t.Errorf("F16: %v, %v; want %v", f, err, want)
	}
	nan := Tensor{Name: "n", DType: "F16", Shape: []int{1}, Data: []byte{0x01, 0x7e}}
	if f, _ := nan.Float32s(); !math.IsNaN(float64(f[0])) {
		t.Errorf("F16 NaN gives %v", f)
	}
	if f, err := sampleTensors()[7].Float32s(); err != nil || !slices.Equal(f, []float32{1, -2.25}) {
		t.Errorf("BF16: %v, %v", f, err)
	}
	if f, err := F64("d", []int{2}, []float64{0.1, -3}).Float64s(); err != nil || !slices.Equal(f, []float64{0.1, -3}) {
		t.Errorf("F64: %v, %v", f, err)
	}
	if f, err := F32("s", []int{1}, []float32{0.1}).Float64s(); err != nil || f[0] != float64(float32(0.1)) {
		t.Errorf("F32 as float64: %v, %v", f, err)
	}
	if v, err := I32("i", []int{2}, []int32{-5, 9}).Int64s(); err != nil || !slices.Equal(v, []int64{-5, 9}) {
		t.Errorf("I32: %v, %v", v, err)
	}
	if v, err := (Tensor{Name: "b", DType: "I8", Shape: []int{2}, Data: []byte{0xff, 3}}).Int64s(); err != nil || !slices.Equal(v, []int64{-1, 3}) {
		t.Errorf("I8: %v, %v", v, err)
	}
	for _, c := range []struct {
		t    Tensor
		f32  bool
		want string
	}{
		{I64("x", []int{1}, []int64{1}), true, `tensor "x" has dtype I64, which does not convert exactly to float32`},
		{F32("y", []int{1}, []float32{1}), false, `tensor "y" has dtype F32, which does not convert exactly to int64`},
		{Tensor{Name: "z", DType: "U64", Shape: []int{}, Data: make([]byte, 8)}, false, "dtype U64"},
		{F32("short", []int{2, 2}, []float32{1, 2, 3}), true, `tensor "short": F32 shape [2 2] needs 16 bytes (4 elements x 4), data has 12`},
		{Tensor{Name: "bad", DType: "I64", Shape: []int{1}, Data: make([]byte, 7)}, false, "needs 8 bytes"},
	} {
		var err error
		if c.f32 {
			_, err = c.t.Float32s()
		} else {
			_, err = c.t.Int64s()
		}
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument saying %q", c.t.Name, err, c.want)
		}
	}
}

func TestWriteInvalid(t *testing.T) {
	ok := F32("ok", []int{1}, []float32{1})
	for _, c := range []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"empty name", []Tensor{ok, F32("", []int{1}, []float32{1})}, "tensor 1 has an empty name"},
		{"duplicate", []Tensor{ok, ok}, `two tensors are named "ok"`},
		{"reserved", []Tensor{F32(metadataKey, []int{1}, []float32{1})}, "reserved for metadata"},
		{"unknown dtype", []Tensor{{Name: "q", DType: "F128", Shape: []int{1}, Data: make([]byte, 16)}}, `tensor "q": unknown dtype "F128"`},
		{"lower-case dtype", []Tensor{{Name: "q", DType: "f32", Shape: []int{1}, Data: make([]byte, 4)}}, `unknown dtype "f32"`},
		{"wrong size", []Tensor{F32("w", []int{2, 3}, []float32{1, 2, 3, 4, 5})}, `tensor "w": F32 shape [2 3] needs 24 bytes`},
		{"negative dim", []Tensor{{Name: "n", DType: "U8", Shape: []int{-1}, Data: nil}}, `tensor "n": dim 0 of shape [-1] is negative`},
		{"overflow", []Tensor{{Name: "o", DType: "F64", Shape: []int{1 << 40, 1 << 40}, Data: nil}}, `tensor "o": shape [1099511627776 1099511627776] has too many elements`},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "x.safetensors")
		err := Write(path, c.tensors, nil)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument naming %s and saying %q", c.name, err, path, c.want)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: a file was created", c.name)
		}
		noTemps(t, dir)
		if err := Encode(&bytes.Buffer{}, c.tensors, nil); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: Encode err = %v", c.name, err)
		}
	}
}

// A failing Write leaves the previous file intact and no temporary file.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.safetensors")
	if err := Write(path, sampleTensors(), sampleMeta); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path)
	intact := func(what string) {
		t.Helper()
		now, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(now, old) {
			t.Errorf("%s: the previous file changed (err %v)", what, err)
		}
		noTemps(t, dir)
	}
	newT := []Tensor{F32("new", []int{1}, []float32{2})}

	// An invalid tensor: nothing is written.
	err := Write(path, append(newT, Tensor{Name: "bad", DType: "F32", Shape: []int{2}, Data: make([]byte, 4)}), nil)
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("invalid tensor: err = %v", err)
	}
	intact("invalid tensor")

	// A failure after the temporary file is complete, before the rename.
	var tmpSeen string
	testHookBeforeRename = func(tmp string) error {
		tmpSeen = tmp
		return errors.New("injected failure")
	}
	err = Write(path, newT, nil)
	testHookBeforeRename = nil
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Errorf("injected failure: err = %v", err)
	}
	if filepath.Dir(tmpSeen) != dir || !strings.HasPrefix(filepath.Base(tmpSeen), ".ckpt.safetensors.tmp") {
		t.Errorf("temporary file %q is not .ckpt.safetensors.tmp* in %s", tmpSeen, dir)
	}
	intact("failure before rename")

	// The target is a directory.
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	if err := Write(sub, newT, nil); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory target: err = %v", err)
	}
	intact("directory target")

	// A directory that is not writable (root ignores permissions).
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		err := Write(path, newT, nil)
		os.Chmod(dir, 0o700)
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), path) {
			t.Errorf("read-only dir: err = %v, want a permission error naming %s", err, path)
		}
		intact("read-only dir")
	}

	// A directory that does not exist.
	missing := filepath.Join(dir, "no", "such", "dir", "x.safetensors")
	if err := Write(missing, newT, nil); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing dir: err = %v, want ErrNotExist naming %s", err, missing)
	}
	intact("missing dir")

	// A successful overwrite replaces the file and keeps its permissions.
	if err := Write(path, newT, nil); err != nil {
		t.Fatal(err)
	}
	got, _, err := Read(path)
	if err != nil || len(got) != 1 || got["new"].DType != "F32" {
		t.Fatalf("after overwrite: %v, %v", got, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("overwrite changed the mode to %v", st.Mode().Perm())
	}
	noTemps(t, dir)
	// A new file gets 0644.
	p2 := filepath.Join(dir, "fresh.safetensors")
	if err := Write(p2, newT, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p2); st.Mode().Perm() != 0o644 {
		t.Errorf("new file has mode %v, want 0644", st.Mode().Perm())
	}
}

func TestReadMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.safetensors")
	if _, _, err := Read(path); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("err = %v, want ErrNotExist naming %s", err, path)
	}
	if _, _, err := Read(t.TempDir()); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("directory: err = %v", err)
	}
}
