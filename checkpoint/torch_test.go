package checkpoint

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const python = "/usr/bin/python3"

// torchScript checks, with nothing but the standard library and torch, that
// the file in argv[1] parses as safetensors and holds the expected values;
// then it writes argv[2] by hand the way the reference writer would (with
// json.dumps' default spacing and no padding), for Go to read back.
const torchScript = `
import json, struct, sys, torch, zlib

src, dst = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert (8 + n) % 8 == 0, "data section not 8-byte aligned"
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = dict(hdr["__metadata__"])
crc = meta.pop("gdist_data_crc32")  # checkpoint.ChecksumKey: zlib.crc32 of the data section
assert int(crc, 16) == zlib.crc32(data), (crc, zlib.crc32(data))
assert meta == {"format": "pt", "writer": "gdist"}, hdr["__metadata__"]
want = {
    "0.weight": torch.tensor([[1.0, -2.0, 3.5], [0.25, 1e-3, -7.0]]),
    "0.bias": torch.tensor([0.5, -0.5]),
}
assert set(hdr) - {"__metadata__"} == set(want), hdr.keys()
for name, w in want.items():
    e = hdr[name]
    assert e["dtype"] == "F32", e
    b, end = e["data_offsets"]
    t = torch.frombuffer(bytearray(data[b:end]), dtype=torch.float32).reshape(e["shape"])
    assert t.shape == w.shape, (name, t.shape, w.shape)
    assert torch.equal(t, w), (name, t, w)

tensors = {
    "w": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5,
    "step": torch.tensor([7, -1], dtype=torch.int64),
    "h": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
    "f16": torch.tensor([0.1, 65504.0], dtype=torch.float16),
}
dtypes = {torch.float32: "F32", torch.int64: "I64", torch.bfloat16: "BF16", torch.float16: "F16"}
header, blobs, off = {"__metadata__": {"from": "torch"}}, [], 0
for name, t in tensors.items():
    b = bytes(t.contiguous().view(torch.uint8).flatten().tolist())
    header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print("ok", torch.__version__)
`

func TestTorchCompat(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is not installed (%v): skipping the PyTorch compatibility test", python, err)
	}
	if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("PyTorch is not importable by %s (%v: %s): skipping; install python3-torch to run this test",
			python, err, strings.TrimSpace(string(out)))
	}
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "go.safetensors"), filepath.Join(dir, "torch.safetensors")
	err := Write(src, []Tensor{
		F32("0.weight", []int{2, 3}, []float32{1, -2, 3.5, 0.25, 1e-3, -7}),
		F32("0.bias", []int{2}, []float32{0.5, -0.5}),
	}, map[string]string{"format": "pt", "writer": "gdist"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, "-c", torchScript, src, dst).CombinedOutput()
	if err != nil {
		t.Fatalf("python/torch rejected the file: %v\n%s", err, out)
	}
	t.Logf("python: %s", strings.TrimSpace(string(out)))

	got, meta, err := Read(dst)
	if err != nil {
		t.Fatalf("reading the file torch wrote: %v", err)
	}
	if meta["from"] != "torch" {
		t.Errorf("meta = %v", meta)
	}
	check := func(name string, shape []int, want []float32) {
		t.Helper()
		tt, ok := got[name]
		if !ok {
			t.Fatalf("tensor %q missing", name)
		}
		v, err := tt.Float32s()
		if err != nil || !slices.Equal(tt.Shape, shape) || !slices.Equal(v, want) {
			t.Errorf("%s: shape %v values %v (%v), want %v %v", name, tt.Shape, v, err, shape, want)
		}
	}
	check("w", []int{2, 3}, []float32{0, 0.5, 1, 1.5, 2, 2.5})
	check("h", []int{2}, []float32{1.5, -2.25})
	check("f16", []int{2}, []float32{0.0999755859375, 65504}) // 0.1 rounded to half
	if v, err := got["step"].Int64s(); err != nil || !slices.Equal(v, []int64{7, -1}) {
		t.Errorf("step = %v, %v", v, err)
	}
}
