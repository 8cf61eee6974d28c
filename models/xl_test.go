package models

import "testing"

func TestXLShape(t *testing.T) {
	m, err := New("mlp-xl", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := 784*4096 + 4096 + 2*(4096*4096+4096) + 4096*10 + 10
	if m.NumParams() != want {
		t.Fatalf("mlp-xl has %d parameters, want %d", m.NumParams(), want)
	}
}
