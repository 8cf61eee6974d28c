package train_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/gdist/gdist/internal/torchref"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gdist/gdist/models"
	"github.com/gdist/gdist/optim"
	"github.com/gdist/gdist/train"
)

// The PyTorch twin of each model, and a loader that reads safetensors by
// hand (Debian's python3-torch lacks the safetensors package).
const torchScript = `
import json, struct, sys, torch, torch.nn as nn
path, name = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8+n]); data = raw[8+n:]
dt = {"F32": torch.float32, "I64": torch.int64}
sd = {}
for k, v in hdr.items():
    if k == "__metadata__": continue
    b, e = v["data_offsets"]
    sd[k] = torch.frombuffer(bytearray(data[b:e]), dtype=dt[v["dtype"]]).reshape(v["shape"])
if name == "mlp":
    m = nn.Sequential(nn.Linear(784,256), nn.ReLU(), nn.Linear(256,128), nn.ReLU(), nn.Linear(128,10))
else:
    bn = name == "cnn-bn"
    L = []
    for cin, cout in ((1, 32), (32, 64)):
        L.append(nn.Conv2d(cin, cout, 3, padding=1))
        if bn: L.append(nn.BatchNorm2d(cout))
        L += [nn.ReLU(), nn.MaxPool2d(2)]
    L += [nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10)]
    m = nn.Sequential(*L)
m.load_state_dict(sd, strict=True)
m.eval()
x = torch.tensor([((i * 37) % 101) / 50.0 - 1.0 for i in range(2 * 784)]).reshape(2, 1, 28, 28)
if name == "mlp": x = x.reshape(2, 784)
with torch.no_grad():
    print(" ".join("%.6g" % v for v in m(x).reshape(-1).tolist()))
`

// TestLoadsInPyTorch: a checkpoint of each model loads into the equivalent
// nn.Sequential with load_state_dict(strict=True) and gives the same
// outputs as our evaluation graph.
func TestLoadsInPyTorch(t *testing.T) {
	torchref.Require(t)
	for _, name := range models.Names() {
		t.Run(name, func(t *testing.T) {
			m, err := models.New(name, 11)
			if err != nil {
				t.Fatal(err)
			}
			// Train one step so that biases and batch-norm state are not at
			// their initial values.
			gr, _ := m.NewGraph(4, true)
			x := make([]float32, 4*784)
			for i := range x {
				x[i] = float32(i%13) / 7
			}
			if _, err := gr.Step(context.Background(), x, []int32{1, 2, 3, 4}); err != nil {
				t.Fatal(err)
			}
			opt, _ := optim.New(optim.Config{Name: "sgd", LR: 0.1}, m.NumParams())
			opt.Step(m.Flat.Value, m.Flat.Grad)
			path := filepath.Join(t.TempDir(), "m.safetensors")
			if err := train.Save(path, m, opt, train.Position{}, nil); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(torchref.Python, "-c", torchScript, path, name)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("python: %v\n%s", err, stderr.String())
			}
			var theirs []float64
			for _, f := range strings.Fields(string(out)) {
				v, _ := strconv.ParseFloat(f, 64)
				theirs = append(theirs, v)
			}
			ev, _ := m.NewGraph(2, false)
			in := make([]float32, 2*784)
			for i := range in {
				in[i] = float32((i*37)%101)/50 - 1
			}
			ours, err := ev.Logits(in)
			if err != nil {
				t.Fatal(err)
			}
			if len(theirs) != len(ours) {
				t.Fatalf("pytorch gave %d outputs, we %d", len(theirs), len(ours))
			}
			for i := range ours {
				if d := float64(ours[i]) - theirs[i]; d > 1e-4 || d < -1e-4 {
					t.Fatalf("output %d: ours %v, pytorch %v", i, ours[i], theirs[i])
				}
			}
			t.Log(fmt.Sprint("outputs agree: ", ours[:3]))
		})
	}
}
