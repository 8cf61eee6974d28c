package devmodel

import "github.com/gdist/gdist/gpu/gemm"

// Engine is d's matrix products' engine.
func Engine(d *Model) *gemm.Engine { return d.h }
